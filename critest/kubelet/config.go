//go:build integration

package kubelet

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
)

// The kubelet's configuration file and command line.

// config is the KubeletConfiguration (JSON is YAML).
func (k *Kubelet) config() map[string]any {
	cfg := k.baseConfig()
	if len(k.opts.FeatureGates) > 0 {
		cfg["featureGates"] = k.opts.FeatureGates
	}
	for key, v := range k.opts.Config {
		cfg[key] = v
	}
	return cfg
}

func (k *Kubelet) baseConfig() map[string]any {
	return map[string]any{
		"apiVersion":         "kubelet.config.k8s.io/v1beta1",
		"kind":               "KubeletConfiguration",
		"failCgroupV1":       false, // this host is cgroup v1
		"cgroupDriver":       "cgroupfs",
		"staticPodPath":      k.ManifestDir,
		"podLogsDir":         k.PodLogsDir,
		"address":            k.opts.NodeIP,
		"port":               k.Port,
		"readOnlyPort":       k.ReadOnly,
		"healthzBindAddress": "127.0.0.1",
		"healthzPort":        k.Healthz,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": true},
			"webhook":   map[string]any{"enabled": false},
		},
		"authorization":          map[string]any{"mode": "AlwaysAllow"},
		"makeIPTablesUtilChains": false,
		"resolvConf":             "", // pods get an empty resolv.conf: nothing resolves
		"failSwapOn":             false,
		// Rotation: small files, checked every 3s (the minimum).
		"containerLogMaxSize":         "1Mi",
		"containerLogMaxFiles":        3,
		"containerLogMonitorInterval": "3s",
		// Quick pick-up of manifests and status.
		"fileCheckFrequency": "2s",
		"syncFrequency":      "10s",
		// Never evict or garbage-collect images on a busy shared disk.
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard": map[string]string{
			"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%",
		},
	}
}

func (k *Kubelet) writeConfig() error {
	b, err := json.MarshalIndent(k.config(), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(k.ConfigPath, append(b, '\n'), 0o644)
}

func (k *Kubelet) args() []string {
	args := []string{
		"--config", k.ConfigPath,
		"--root-dir", k.RootDir,
		"--cert-dir", filepath.Join(k.opts.Dir, "pki"),
		"--volume-plugin-dir", filepath.Join(k.opts.Dir, "volume-plugins"),
		"--container-runtime-endpoint", k.opts.RuntimeEndpoint,
		"--hostname-override", k.opts.NodeName,
		"--node-ip", k.opts.NodeIP,
		"--v", strconv.Itoa(cmp.Or(k.opts.Verbosity, 2)),
	}
	if k.opts.Kubeconfig != "" {
		args = append(args, "--kubeconfig", k.opts.Kubeconfig)
	}
	return args
}
