// Package runtime implements the CRI RuntimeService of shimd as a façade: one file per
// RPC (sandbox_*.go, container_*.go, status.go, version.go), each of which validates
// its request (validate_*.go) and delegates to the sandbox manager (package sandbox,
// through PodSandboxes), the container manager (package container) or the stats
// collector (package stats). It holds no state of its own. What containers and the
// spec builder know of a pod is a value of package pod that the sandbox manager
// hands out.
//
// RunPodSandbox, end to end:
//
//	cmd/shimd interceptor: request id + logger, Unavailable until recovery is done,
//	    panic -> Internal, errdefs class -> gRPC code (the only place codes are chosen),
//	    then the RPC's latency and code into shimd's metrics
//	runtime.RunPodSandbox: validateSandboxConfig (InvalidArgument naming the field)
//	sandbox.Manager.Run: reserve the name (a retry joins or reuses the first Run), then,
//	    detached from the request so a kubelet timeout leaves a whole pod or nothing:
//	    1. pause image (built in, imported once per snapshotter)
//	    2. containerd container, phase "creating" (the durable intent record)
//	    3. hostname, hosts, resolv.conf (from DNSConfig only), /dev/shm tmpfs
//	    4. network namespace pinned at <state>/netns/<id>
//	    5. CNI ADD (the network loaded from cni.conf_dir now; libcni caches it for the
//	       DEL) and the pause task, concurrently
//	    6. record phase "created" with the IPs: READY
//	    each step pushes its undo; on failure they run in reverse.
//	    With sandbox.pause = "when-needed" a pod that needs no pause (own PID
//	    namespaces, no user namespace, runc) skips 1 and the task: its net, IPC and
//	    UTS namespaces are pinned in step 4 (sandbox/pauseless.go) and containers
//	    join them by path.
//
// StopPodSandbox kills the pause task, runs CNI DEL (with the config the pod's ADD
// cached, even after cni.conf_dir changed), removes the netns and unmounts
// /dev/shm; RemovePodSandbox also deletes the container, its snapshot and its files.
// Both are idempotent and succeed for unknown ids.
//
// After a restart sandbox.Manager.Recover rebuilds the store from containerd (see
// sandbox/recover.go for its assumptions), container.Manager.Recover the containers (a start cut
// short is undone or adopted, so the kubelet's retry succeeds), and
// sandbox.Manager.Sweep stops shims no task uses and removes empty cgroups no
// container has (sandbox/shims.go, sandbox/cgroups.go). One event monitor
// (package taskevents, owned by cmd/shimd) follows task exits, deletes and OOM kills
// for sandboxes and containers alike, re-reading every sandbox's and container's state
// and sweeping again whenever it reconnects to containerd. The runtime service asks
// of package sandbox only what PodSandboxes (service.go) declares.
//
// Flow 2 lives in package container (container.Manager, which mirrors
// sandbox.Manager):
//
// CreateContainer / StartContainer: the sandbox must be READY -> reserve the name ->
// resolve the image locally -> prepare the writable layer under a lease and resolve the
// user in it -> mount the pod's image volumes (container/image_volumes.go) -> build the
// OCI spec (spec, a pure function) -> inject the CDI devices asked for
// (container/cdi.go; checked first) -> NRI plugins adjust the spec (container/nri.go)
// -> containerd container -> status CREATED.
// A create retried with the same name and config returns the first call's container
// (waiting for it while the first call still runs).
// Start: a task with its stdio FIFOs copied to the CRI log (started in the pod's
// running shim) -> RUNNING; the event monitor sees the exit. A start that fails
// because the pod stopped meanwhile is FailedPrecondition.
//
// Every lifecycle change of a container or sandbox is also published to
// GetContainerEvents subscribers (container/events.go) with the pod's statuses, and
// told to NRI plugins (container/nri.go lists when, and which answers count).
//
// The CRI stats and metrics RPCs (container_stats.go, sandbox_stats.go,
// sandbox_metrics.go) ask package stats, which reads the cgroup, netns and snapshot
// data and names the metrics as cAdvisor does.
//
// Exec / Attach / PortForward: the RPC validates and returns a URL of the streaming
// server (package streaming) and starts nothing; the kubelet connects to that URL; the
// backend (streaming.go: container.Streams and sandbox_portforward.go) then runs a
// containerd exec, attaches to the container's IO broadcasters, or dials the port inside the pod's network namespace (for a gVisor
// pod, whose loopback lives in its Sentry, runsc connects it: network.Runsc).
//
// Runtime handlers: each is a containerd shim with its options (runc's, or for any
// other shim containerd's CRI runtime options naming its config file). The pause
// container and every container carry the CRI annotations containerd's CRI plugin
// sets (container type, sandbox id, names, log directory), by which runsc and Kata
// put a pod's containers into the pod's sandbox.
package runtime
