package container

import (
	"errors"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/shimd/shimd/spec"
)

func TestAppArmorSpecInput(t *testing.T) {
	runtimeDefault := &runtimeapi.LinuxContainerSecurityContext{
		Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}}
	unconfined := &runtimeapi.LinuxContainerSecurityContext{
		Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}}
	localhost := &runtimeapi.LinuxContainerSecurityContext{
		Apparmor: &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: "shimd-test-not-loaded"}}
	withDefault := NodeInfo{AppArmor: true, AppArmorDefault: "shimd-default"}
	tests := []struct {
		name    string
		node    NodeInfo
		sc      *runtimeapi.LinuxContainerSecurityContext
		loadErr error
		loads   int
		wantErr error
	}{
		{name: "no AppArmor", sc: runtimeDefault},
		{name: "no default profile", node: NodeInfo{AppArmor: true}, sc: runtimeDefault},
		{name: "nothing asked loads the default", node: withDefault, loads: 1},
		{name: "RuntimeDefault loads the default", node: withDefault, sc: runtimeDefault, loads: 1},
		{name: "privileged needs none", node: withDefault, sc: &runtimeapi.LinuxContainerSecurityContext{Privileged: true}},
		{name: "Unconfined needs none", node: withDefault, sc: unconfined},
		{name: "a failed load fails the create", node: withDefault, sc: runtimeDefault,
			loadErr: errors.New("apparmor_parser: not found"), loads: 1, wantErr: errdefs.ErrFailedPrecondition},
		{name: "Localhost not loaded", node: withDefault, sc: localhost, wantErr: errdefs.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := New(Options{Node: tc.node})
			loads := 0
			m.confine.apparmor.load = func(name string) error {
				require.Equal(t, tc.node.AppArmorDefault, name)
				loads++
				return tc.loadErr
			}
			var in spec.Input
			err := m.confine.appArmorSpecInput(tc.sc, &in)
			require.Equal(t, tc.loads, loads)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.node.AppArmor, in.AppArmorEnabled)
			require.Equal(t, tc.node.AppArmorDefault, in.AppArmorDefault)
		})
	}
}
