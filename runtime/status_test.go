package runtime

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shimd/shimd/container"
)

func TestAppArmorInfo(t *testing.T) {
	type info struct {
		Enabled        bool   `json:"enabled"`
		DefaultProfile string `json:"defaultProfile"`
		Note           string `json:"note"`
	}
	tests := []struct {
		name     string
		node     container.NodeInfo
		want     info
		noteHint string
	}{
		{name: "no AppArmor", want: info{}, noteHint: "no AppArmor"},
		{name: "no parser", node: container.NodeInfo{AppArmor: true}, want: info{Enabled: true}, noteHint: "apparmor_parser"},
		{name: "default profile", node: container.NodeInfo{AppArmor: true, AppArmorDefault: "shimd-default"},
			want: info{Enabled: true, DefaultProfile: "shimd-default"}, noteHint: "privileged ones unconfined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got info
			require.NoError(t, json.Unmarshal([]byte(appArmorInfo(tc.node)), &got))
			require.Contains(t, got.Note, tc.noteHint)
			got.Note = ""
			require.Equal(t, tc.want, got)
		})
	}
}
