package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const testPasswd = `root:x:0:0:root:/root:/bin/sh
alice:x:1000:1000::/home/alice:/bin/sh
bob:x:1001:1001::/home/bob:/bin/sh
www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin
`

const testGroup = `root:x:0:
wheel:x:10:root
audio:x:29:alice
www-data:x:33:
staff:x:50:alice,bob
alice:x:1000:
bob:x:1001:
predefined:x:50000:alice
`

// rootfsWith makes a rootfs holding the given /etc files ("" = absent).
func rootfsWith(t *testing.T, passwd, group string) string {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	for name, content := range map[string]string{"passwd": passwd, "group": group} {
		if content != "" {
			require.NoError(t, os.WriteFile(filepath.Join(root, "etc", name), []byte(content), 0o644))
		}
	}
	return root
}

func i64(v int64) *runtimeapi.Int64Value { return &runtimeapi.Int64Value{Value: v} }

func TestResolveUser(t *testing.T) {
	full := rootfsWith(t, testPasswd, testGroup)
	noFiles := rootfsWith(t, "", "")
	noGroup := rootfsWith(t, testPasswd, "")
	tests := []userCase{
		{name: "nothing: root and its groups", rootfs: full,
			want: User{UID: 0, GID: 0, AdditionalGIDs: []uint32{0, 10}, Username: "root"}},
		{name: "nil security context", rootfs: full, sc: nil, imageUser: "bob",
			want: User{UID: 1001, GID: 1001, AdditionalGIDs: []uint32{50, 1001}, Username: "bob"}},
		{name: "image uid", rootfs: full, imageUser: "1000",
			want: User{UID: 1000, GID: 1000, AdditionalGIDs: []uint32{29, 50, 1000, 50000}, Username: "alice"}},
		{name: "image name", rootfs: full, imageUser: "alice",
			want: User{UID: 1000, GID: 1000, AdditionalGIDs: []uint32{29, 50, 1000, 50000}, Username: "alice"}},
		{name: "image uid:gid", rootfs: full, imageUser: "1000:50",
			want: User{UID: 1000, GID: 50, AdditionalGIDs: []uint32{29, 50, 50000}, Username: "alice"}},
		{name: "image name:group", rootfs: full, imageUser: "www-data:staff",
			want: User{UID: 33, GID: 50, AdditionalGIDs: []uint32{50}, Username: "www-data"}},
		{name: "image name:gid not in group file", rootfs: full, imageUser: "www-data:1004",
			want: User{UID: 33, GID: 1004, AdditionalGIDs: []uint32{1004}, Username: "www-data"}},
		{name: "image uid without passwd entry: gid 0", rootfs: full, imageUser: "1002",
			want: User{UID: 1002, GID: 0, AdditionalGIDs: []uint32{0}}},
		{name: "image uid:gid without entries", rootfs: full, imageUser: "1003:1004",
			want: User{UID: 1003, GID: 1004, AdditionalGIDs: []uint32{1004}}},
		{name: "image :gid means root", rootfs: full, imageUser: ":29",
			want: User{UID: 0, GID: 29, AdditionalGIDs: []uint32{10, 29}, Username: "root"}},
		{name: "unknown image user", rootfs: full, imageUser: "nobody", wantErr: errdefs.ErrInvalidArgument},
		{name: "unknown image group", rootfs: full, imageUser: "alice:nogroup", wantErr: errdefs.ErrInvalidArgument},
		{name: "image user with two colons", rootfs: full, imageUser: "a:b:c", wantErr: errdefs.ErrInvalidArgument},
		{name: "image uid out of range", rootfs: full, imageUser: "4294967296", wantErr: errdefs.ErrInvalidArgument},
		{name: "image uid above runc's limit", rootfs: full, imageUser: "2147483648", wantErr: errdefs.ErrInvalidArgument},
		{name: "image negative uid", rootfs: full, imageUser: "-1", wantErr: errdefs.ErrInvalidArgument},
		{name: "no passwd: numeric user, gid 0", rootfs: noFiles, imageUser: "1000",
			want: User{UID: 1000, GID: 0, AdditionalGIDs: []uint32{0}}},
		{name: "no passwd: numeric uid:gid", rootfs: noFiles, imageUser: "1000:1000",
			want: User{UID: 1000, GID: 1000, AdditionalGIDs: []uint32{1000}}},
		{name: "no passwd: root by default", rootfs: noFiles,
			want: User{UID: 0, GID: 0, AdditionalGIDs: []uint32{0}}},
		{name: "no passwd: a name is an error", rootfs: noFiles, imageUser: "alice", wantErr: errdefs.ErrInvalidArgument},
		{name: "no group file: user's own gid only", rootfs: noGroup, imageUser: "alice",
			want: User{UID: 1000, GID: 1000, AdditionalGIDs: []uint32{1000}, Username: "alice"}},
		{name: "no group file: a group name is an error", rootfs: noGroup, imageUser: "alice:staff", wantErr: errdefs.ErrInvalidArgument},
	}
	runUserCases(t, tests)
}

func TestResolveUserSecurityContext(t *testing.T) {
	full := rootfsWith(t, testPasswd, testGroup)
	strict := runtimeapi.SupplementalGroupsPolicy_Strict
	runUserCases(t, []userCase{
		{name: "run_as_user overrides the image user and its group", rootfs: full, imageUser: "alice:staff",
			sc:   &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1001)},
			want: User{UID: 1001, GID: 1001, AdditionalGIDs: []uint32{50, 1001}, Username: "bob"}},
		{name: "run_as_user 0", rootfs: full, imageUser: "alice",
			sc:   &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(0)},
			want: User{UID: 0, GID: 0, AdditionalGIDs: []uint32{0, 10}, Username: "root"}},
		{name: "run_as_username overrides run_as_user", rootfs: full,
			sc:   &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1000), RunAsUsername: "bob"},
			want: User{UID: 1001, GID: 1001, AdditionalGIDs: []uint32{50, 1001}, Username: "bob"}},
		{name: "unknown run_as_username", rootfs: full,
			sc: &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "mallory"}, wantErr: errdefs.ErrInvalidArgument},
		{name: "negative run_as_user", rootfs: full,
			sc: &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(-1)}, wantErr: errdefs.ErrInvalidArgument},
		{name: "run_as_group overrides the group, user's groups kept", rootfs: full,
			sc:   &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1000), RunAsGroup: i64(29)},
			want: User{UID: 1000, GID: 29, AdditionalGIDs: []uint32{29, 50, 50000}, Username: "alice"}},
		// As containerd and critest require: a group needs a user to go with it.
		{name: "run_as_group without a user is refused", rootfs: full, imageUser: "alice:staff",
			sc: &runtimeapi.LinuxContainerSecurityContext{RunAsGroup: i64(7)}, wantErr: errdefs.ErrInvalidArgument},
		{name: "run_as_group alone is refused", rootfs: full,
			sc: &runtimeapi.LinuxContainerSecurityContext{RunAsGroup: i64(7)}, wantErr: errdefs.ErrInvalidArgument},
		{name: "negative run_as_group", rootfs: full,
			sc: &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1), RunAsGroup: i64(-5)}, wantErr: errdefs.ErrInvalidArgument},
		{name: "supplemental groups added, duplicates once", rootfs: full, imageUser: "alice",
			sc:   &runtimeapi.LinuxContainerSecurityContext{SupplementalGroups: []int64{60000, 50, 5}},
			want: User{UID: 1000, GID: 1000, AdditionalGIDs: []uint32{5, 29, 50, 1000, 50000, 60000}, Username: "alice"}},
		{name: "negative supplemental group", rootfs: full,
			sc: &runtimeapi.LinuxContainerSecurityContext{SupplementalGroups: []int64{-1}}, wantErr: errdefs.ErrInvalidArgument},
		{name: "Strict: no groups from /etc/group", rootfs: full, imageUser: "alice",
			sc:   &runtimeapi.LinuxContainerSecurityContext{SupplementalGroupsPolicy: strict, SupplementalGroups: []int64{60000}},
			want: User{UID: 1000, GID: 1000, AdditionalGIDs: []uint32{1000, 60000}, Username: "alice"}},
		{name: "Strict with run_as_group", rootfs: full,
			sc:   &runtimeapi.LinuxContainerSecurityContext{SupplementalGroupsPolicy: strict, RunAsUser: i64(1000), RunAsGroup: i64(50000)},
			want: User{UID: 1000, GID: 50000, AdditionalGIDs: []uint32{50000}, Username: "alice"}},
		{name: "unknown policy", rootfs: full,
			sc: &runtimeapi.LinuxContainerSecurityContext{SupplementalGroupsPolicy: 7}, wantErr: errdefs.ErrInvalidArgument},
	})
}

type userCase struct {
	name      string
	rootfs    string
	sc        *runtimeapi.LinuxContainerSecurityContext
	imageUser string
	want      User
	wantErr   error
}

func runUserCases(t *testing.T, tests []userCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveUser(tc.rootfs, tc.sc, tc.imageUser)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestResolveUserFiles(t *testing.T) {
	t.Run("missing rootfs", func(t *testing.T) {
		_, err := ResolveUser(filepath.Join(t.TempDir(), "nope"), nil, "")
		require.Error(t, err)
	})
	t.Run("absolute symlink resolved inside the rootfs", func(t *testing.T) {
		root := rootfsWith(t, "", "")
		require.NoError(t, os.MkdirAll(filepath.Join(root, "usr/share"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, "usr/share/passwd"), []byte(testPasswd), 0o644))
		require.NoError(t, os.Symlink("/usr/share/passwd", filepath.Join(root, "etc/passwd")))
		got, err := ResolveUser(root, nil, "bob")
		require.NoError(t, err)
		require.Equal(t, uint32(1001), got.UID)
	})
	t.Run("symlink out of the rootfs does not read the host", func(t *testing.T) {
		root := rootfsWith(t, "", "")
		outside := rootfsWith(t, testPasswd, "")
		require.NoError(t, os.Symlink(filepath.Join(outside, "etc/passwd"), filepath.Join(root, "etc/passwd")))
		_, err := ResolveUser(root, nil, "bob")
		require.ErrorIs(t, err, errdefs.ErrInvalidArgument, "bob must not be found through the link")
	})
	t.Run("passwd that is a directory", func(t *testing.T) {
		root := rootfsWith(t, "", "")
		require.NoError(t, os.Mkdir(filepath.Join(root, "etc/passwd"), 0o755))
		_, err := ResolveUser(root, nil, "bob")
		require.Error(t, err)
	})
}

// A group file of millions of empty members (CVE-2026-47262) costs about nothing
// once read; members still count whatever their place in the list; a line too long
// to parse is the image's fault.
func TestUserDBGroupBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("alice:x:1000:\nfirst:x:7:alice,,\nmiddle:x:8:,,bob,alice,,carol\nsub:x:9:alicex,xalice\n")
	for i := 0; i < 150; i++ {
		fmt.Fprintf(&b, "bomb%d:x:%d:%s\n", i, 5000+i, strings.Repeat(",", 65000))
	}
	db, err := ReadUserDB(rootfsWith(t, testPasswd, b.String()))
	require.NoError(t, err)
	require.Less(t, db.Bytes(), 64<<10, "what the database keeps")
	u, err := db.Resolve(nil, "alice")
	require.NoError(t, err)
	require.Equal(t, []uint32{7, 8, 1000}, u.AdditionalGIDs)

	_, err = ReadUserDB(rootfsWith(t, testPasswd, "g:x:1:"+strings.Repeat(",", 1<<20)+"\n"))
	require.True(t, errdefs.IsInvalidArgument(err), "%v", err)

	// /etc a link that loops.
	loop := t.TempDir()
	require.NoError(t, os.Symlink("/etc", filepath.Join(loop, "etc")))
	_, err = ReadUserDB(loop)
	require.True(t, errdefs.IsInvalidArgument(err), "%v", err)
}
