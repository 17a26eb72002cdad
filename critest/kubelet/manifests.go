//go:build integration

package kubelet

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Images from the offline set (critest/images), by their upstream names.
const (
	BusyboxImage = "docker.io/library/busybox:latest"
	NginxImage   = "registry.k8s.io/e2e-test-images/nginx:1.14-2" // stand-in: HTTP 200 on :80
)

// Outputs the pods print, checked through /containerLogs.
const (
	initOutput   = "from-init-container"
	writerOutput = "from-writer-container"
	loggerLines  = 40000 // ~8 MB of CRI log: several rotations at 1Mi

	imageVolumeOutput = "image-volume-read-only"
)

// newPod is a static pod with the settings every test pod shares: the pod
// network, an empty resolv.conf (dnsPolicy Default + resolvConf ""), quick
// termination (sleep as PID 1 ignores SIGTERM).
func newPod(name string, containers ...corev1.Container) *corev1.Pod {
	grace := int64(2)
	for i := range containers {
		containers[i].ImagePullPolicy = corev1.PullIfNotPresent
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			Containers:                    containers,
			DNSPolicy:                     corev1.DNSDefault,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
		},
	}
}

func shell(name, image, script string) corev1.Container {
	return corev1.Container{Name: name, Image: image, Command: []string{"sh", "-c", script}}
}

func emptyDir(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
}

func mount(name, path string) []corev1.VolumeMount {
	return []corev1.VolumeMount{{Name: name, MountPath: path}}
}

// sharePod: an init container writes a file into an emptyDir; "writer"
// writes another; "reader" waits for both and prints them.
func sharePod() *corev1.Pod {
	writer := shell("writer", BusyboxImage, fmt.Sprintf("echo %s > /data/writer.txt; exec sleep 3600", writerOutput))
	reader := shell("reader", BusyboxImage,
		"while [ ! -f /data/writer.txt ]; do sleep 0.2; done; cat /data/init.txt /data/writer.txt; echo reader-done; exec sleep 3600")
	writer.VolumeMounts, reader.VolumeMounts = mount("data", "/data"), mount("data", "/data")
	p := newPod("share", writer, reader)
	initc := shell("init", BusyboxImage, fmt.Sprintf("echo %s > /data/init.txt", initOutput))
	initc.ImagePullPolicy = corev1.PullIfNotPresent
	initc.VolumeMounts = mount("data", "/data")
	p.Spec.InitContainers = []corev1.Container{initc}
	p.Spec.Volumes = []corev1.Volume{emptyDir("data")}
	return p
}

// probePod: "app" counts its starts in an emptyDir (which outlives
// container restarts); on its first two starts /tmp/healthy disappears
// after 6s, so the liveness probe fails and the kubelet restarts it; from
// the third start on it stays healthy. A readiness probe checks /tmp/ready.
func probePod() *corev1.Pod {
	app := shell("app", BusyboxImage, `n=$(cat /state/starts 2>/dev/null || echo 0); n=$((n+1)); echo $n > /state/starts
echo "start $n"
touch /tmp/healthy /tmp/ready
if [ $n -le 2 ]; then sleep 6; rm /tmp/healthy; echo "unhealthy now"; fi
exec sleep 3600`)
	app.VolumeMounts = mount("state", "/state")
	execProbe := func(args ...string) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: args}},
			PeriodSeconds: 2, TimeoutSeconds: 5, FailureThreshold: 1, SuccessThreshold: 1,
		}
	}
	app.LivenessProbe = execProbe("test", "-f", "/tmp/healthy")
	app.ReadinessProbe = execProbe("test", "-f", "/tmp/ready")
	p := newPod("probe", app)
	p.Spec.Volumes = []corev1.Volume{emptyDir("state")}
	return p
}

// webPod: the nginx stand-in with containerPort 80 published on hostPort,
// ready when the kubelet's HTTP probe (host -> pod IP) gets a 200.
func webPod(hostPort int) *corev1.Pod {
	web := corev1.Container{
		Name: "web", Image: NginxImage,
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80, HostPort: int32(hostPort), Protocol: corev1.ProtocolTCP}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(80)}},
			PeriodSeconds: 2, TimeoutSeconds: 5, FailureThreshold: 1, SuccessThreshold: 1,
		},
	}
	return newPod("web", web)
}

// loggerPod prints loggerLines numbered lines of ~170 bytes in bursts of
// 2000 a second, then "logger-done", then a numbered tick every second.
func loggerPod() *corev1.Pod {
	return newPod("logger", shell("logger", BusyboxImage, fmt.Sprintf(`pad=$(printf '%%0150d' 0)
i=0
while [ $i -lt %d ]; do i=$((i+1)); echo "line $i $pad"; if [ $((i %% 2000)) -eq 0 ]; then sleep 1; fi; done
echo logger-done
j=0
while true; do j=$((j+1)); echo "tick $j"; sleep 1; done`, loggerLines)))
}

// imageVolumePod mounts the busybox image as a volume, whole at /img and its bin
// directory at /imgbin, runs a program from it and fails to write to it.
func imageVolumePod() *corev1.Pod {
	reader := shell("reader", BusyboxImage, fmt.Sprintf(
		"/img/bin/busybox test -x /imgbin/busybox && ! touch /img/x 2>/dev/null && echo %s; exec sleep 3600", imageVolumeOutput))
	reader.VolumeMounts = []corev1.VolumeMount{{Name: "img", MountPath: "/img"}, {Name: "img", MountPath: "/imgbin", SubPath: "bin"}}
	p := newPod("imgvol", reader)
	p.Spec.Volumes = []corev1.Volume{{Name: "img", VolumeSource: corev1.VolumeSource{
		Image: &corev1.ImageVolumeSource{Reference: BusyboxImage, PullPolicy: corev1.PullIfNotPresent}}}}
	return p
}
