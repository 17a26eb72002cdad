//go:build integration

package cgroupv2

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// CRIU 4.1 checkpoints a running container on cgroup v2 and restores it into
// another pod: the restored process counts on from the checkpoint's count, in a
// cgroup of the new pod's kind (a scope under its slice with the systemd driver)
// that has the container's memory limit.
func TestCheckpointRestoreOnCgroupV2(t *testing.T) {
	requireGuest(t)
	if code, _ := shCode(t, "command -v criu"); code != 0 {
		t.Fatal("no criu in the guest: build CRIU 4.1 on the host (make tools) so that provision.sh links it")
	}
	t.Log(sh(t, "criu --version | head -1"))
	// /count is replaced by a rename, never truncated and rewritten in place: a
	// checkpoint between the two would find it empty (critest/e2e's counterScript).
	script := []string{"sh", "-c", "i=0; while true; do i=$((i+1)); echo n=$i; echo $i > /count.new; mv /count.new /count; sleep 0.2; done"}
	const resources = `{"memory_limit_in_bytes":67108864}`
	src := newPod(t, "cpsource")
	id := src.container("counter", script, resources)
	lastCount := func(id string) int {
		logPath := sh(t, `crictl inspect -o go-template --template '{{.status.logPath}}' `+id)
		n, _ := strconv.Atoi(sh(t, `grep -o 'n=[0-9]*' `+logPath+` | tail -n 1 | cut -d= -f2`))
		return n
	}
	waitCount := func(id string, atLeast int) {
		for deadline := time.Now().Add(2 * time.Minute); lastCount(id) < atLeast; time.Sleep(time.Second) {
			require.True(t, time.Now().Before(deadline), "container %s did not count to %d", id, atLeast)
		}
	}
	waitCount(id, 10)

	archive := fmt.Sprintf("/var/tmp/checkpoint-%s.tar", id[:12])
	t.Cleanup(func() { sh(t, "rm -f "+archive) })
	start := time.Now()
	sh(t, "crictl checkpoint --export="+archive+" "+id)
	t.Logf("checkpoint: %s, archive %s bytes", time.Since(start).Round(time.Millisecond), sh(t, "stat -c %s "+archive))
	atCheckpoint, err := strconv.Atoi(sh(t, "tar -xOf "+archive+" rootfs-diff.tar | tar -xOf - count"))
	require.NoError(t, err, "the archive's rootfs-diff.tar holds /count")
	require.Equal(t, "CONTAINER_RUNNING", sh(t, `crictl inspect -o go-template --template '{{.status.state}}' `+id),
		"the source runs on after the checkpoint")

	dst := newPod(t, "cptarget")
	cmd, _ := json.Marshal(script)
	cfg := file(t, "ctr-"+dst.id[:12]+"-restored.json", fmt.Sprintf(`{"metadata":{"name":"counter"},"image":{"image":%q},
		"command":%s,"log_path":"counter.log","linux":{"resources":%s}}`, archive, cmd, resources))
	restored := sh(t, fmt.Sprintf("crictl create %s %s %s", dst.id, cfg, dst.config))
	start = time.Now()
	sh(t, "crictl start "+restored+" >/dev/null")
	t.Logf("restore (start): %s", time.Since(start).Round(time.Millisecond))
	waitCount(restored, atCheckpoint+5)
	// The restored process goes on from the checkpoint's count, not from 1.
	first := sh(t, `grep -o 'n=[0-9]*' `+sh(t, `crictl inspect -o go-template --template '{{.status.logPath}}' `+restored)+` | head -n 1 | cut -d= -f2`)
	firstN, err := strconv.Atoi(first)
	require.NoError(t, err)
	require.Greater(t, firstN, atCheckpoint-1, "the restored counter started over")

	dir := cgroupDir(t, restored)
	t.Logf("restored container's cgroup %s", dir)
	require.Equal(t, "67108864", readCgroup(t, dir, "memory.max")["memory.max"])
	if vmDriver == "systemd" {
		require.Contains(t, dir, "/kubepods-burstable-podcptarget_")
		require.True(t, strings.HasSuffix(dir, ".scope"), "cgroup %s is a systemd scope", dir)
	} else {
		require.Contains(t, dir, "/kubepods/burstable/podcptarget-")
	}
}
