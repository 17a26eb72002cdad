package container

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

const cdiSpecA = `cdiVersion: "0.6.0"
kind: test.shimd.io/dev
devices:
- name: a
  containerEdits:
    env: ["DEV_A=1"]
    deviceNodes:
    - path: /dev/shimd-a
      hostPath: /dev/null
- name: twice
  containerEdits:
    env: ["TWICE=a"]
containerEdits:
  env: ["VENDOR=test"]
`

const cdiSpecB = `cdiVersion: "0.6.0"
kind: test.shimd.io/dev
devices:
- name: twice
  containerEdits:
    env: ["TWICE=b"]
`

func cdiService(t *testing.T) cdiInjector {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(cdiSpecA), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.yaml"), []byte(cdiSpecB), 0o644))
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	require.NoError(t, err)
	return cdiInjector{registry: cache}
}

func TestCDIDevicesOrderAndAnnotations(t *testing.T) {
	cfg := &runtimeapi.ContainerConfig{
		CDIDevices: []*runtimeapi.CDIDevice{{Name: "v.io/c=1"}, {Name: "v.io/c=2"}},
		Annotations: map[string]string{
			"cdi.k8s.io/z": "v.io/c=3", "cdi.k8s.io/a": "v.io/c=2,v.io/c=4", "other": "v.io/c=9",
		},
	}
	got, err := cdiDevices(cfg)
	require.NoError(t, err)
	require.Equal(t, []string{"v.io/c=1", "v.io/c=2", "v.io/c=4", "v.io/c=3"}, got)

	_, err = cdiDevices(&runtimeapi.ContainerConfig{Annotations: map[string]string{"cdi.k8s.io/x": "gpu0"}})
	require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
	require.ErrorContains(t, err, `cdi.k8s.io/x`)
	require.ErrorContains(t, err, `gpu0`)
}

func TestCDIInjectAndErrors(t *testing.T) {
	d := cdiService(t)
	tests := []struct {
		name    string
		devices []string
		wantErr []string
	}{
		{name: "known device", devices: []string{"test.shimd.io/dev=a"}},
		{name: "unknown device", devices: []string{"test.shimd.io/dev=a", "test.shimd.io/dev=nope"},
			wantErr: []string{`unknown CDI device "test.shimd.io/dev=nope"`}},
		{name: "ambiguous device", devices: []string{"test.shimd.io/dev=twice"},
			wantErr: []string{`CDI device "test.shimd.io/dev=twice" is ambiguous`, "a.yaml", "b.yaml"}},
		{name: "unqualified name", devices: []string{"gpu0"}, wantErr: []string{`"gpu0" is not a fully qualified name`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg runtimeapi.ContainerConfig
			for _, d := range tt.devices {
				cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: d})
			}
			err := d.check(&cfg)
			if tt.wantErr == nil {
				require.NoError(t, err)
				sp := &specs.Spec{Process: &specs.Process{Env: []string{"PATH=/bin"}}, Linux: &specs.Linux{}}
				require.NoError(t, d.inject(sp, &cfg))
				require.Subset(t, sp.Process.Env, []string{"PATH=/bin", "DEV_A=1", "VENDOR=test"})
				require.Len(t, sp.Linux.Devices, 1)
				require.Equal(t, "/dev/shimd-a", sp.Linux.Devices[0].Path)
				return
			}
			require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
			for _, w := range tt.wantErr {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestCDIOff(t *testing.T) {
	var d cdiInjector
	require.NoError(t, d.check(&runtimeapi.ContainerConfig{}))
	err := d.check(&runtimeapi.ContainerConfig{CDIDevices: []*runtimeapi.CDIDevice{{Name: "v.io/c=1"}}})
	require.True(t, errdefs.IsFailedPrecondition(err), "%v", err)
	require.ErrorContains(t, err, "cdi.enabled")
}
