package spec

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/moby/sys/user"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// User is the process user of a container, resolved against its rootfs.
type User struct {
	UID, GID       uint32
	AdditionalGIDs []uint32 // sorted, without duplicates, including GID
	Username       string   // for annotations/status only; "" for a uid without passwd entry
}

// ResolveUser resolves the container's user against the rootfs directory, reading
// <rootfs>/etc/passwd and <rootfs>/etc/group without following links out of it
// (either file may be missing).
//
//   - user: run_as_username, else run_as_user, else the image's USER ("uid", "name",
//     "uid:gid", "name:group"), else root;
//   - group: run_as_group, else the group of the image's USER when that is the user
//     chosen, else the user's passwd entry, else 0;
//   - additional groups: the primary group, plus the user's groups from /etc/group
//     unless SupplementalGroupsPolicy is Strict, plus supplemental_groups.
//
// A numeric user needs no passwd entry; an unknown user or group name is an error
// (InvalidArgument naming the field). So are ids outside [0, 2^31-1], runc's limit.
func ResolveUser(rootfs string, sc *runtimeapi.LinuxContainerSecurityContext, imageUser string) (User, error) {
	if _, _, _, _, err := userArgs(sc, imageUser); err != nil {
		return User{}, err
	}
	db, err := ReadUserDB(rootfs)
	if err != nil {
		return User{}, err
	}
	return db.Resolve(sc, imageUser)
}

// Resolve is ResolveUser on the files db was read from.
func (db *UserDB) Resolve(sc *runtimeapi.LinuxContainerSecurityContext, imageUser string) (User, error) {
	userArg, groupArg, userField, groupField, err := userArgs(sc, imageUser)
	if err != nil {
		return User{}, err
	}
	u, err := db.lookupUser(userArg, userField)
	if err != nil {
		return User{}, err
	}
	if groupArg != "" {
		if u.GID, err = db.lookupGroup(groupArg, groupField); err != nil {
			return User{}, err
		}
	}
	gids := []uint32{u.GID}
	switch p := sc.GetSupplementalGroupsPolicy(); p {
	case runtimeapi.SupplementalGroupsPolicy_Merge:
		if u.Username != "" {
			gids = append(gids, db.groupsOf(u.Username)...)
		}
	case runtimeapi.SupplementalGroupsPolicy_Strict:
	default:
		return User{}, invalid(secField+".supplemental_groups_policy", "unknown policy %d", p)
	}
	for i, g := range sc.GetSupplementalGroups() {
		if g < 0 || g > math.MaxInt32 {
			return User{}, invalid(fmt.Sprintf("%s.supplemental_groups[%d]", secField, i), "%d out of range", g)
		}
		gids = append(gids, uint32(g))
	}
	slices.Sort(gids)
	u.AdditionalGIDs = slices.Compact(gids)
	return u, nil
}

// userArgs picks the user and group strings and the fields they come from.
func userArgs(sc *runtimeapi.LinuxContainerSecurityContext, imageUser string) (userArg, groupArg, userField, groupField string, err error) {
	switch {
	case sc.GetRunAsUsername() != "":
		userArg, userField = sc.GetRunAsUsername(), secField+".run_as_username"
	case sc.GetRunAsUser() != nil:
		userArg, userField = strconv.FormatInt(sc.GetRunAsUser().GetValue(), 10), secField+".run_as_user"
	default:
		userField, groupField = "image.user", "image.user"
		if strings.Count(imageUser, ":") > 1 {
			return "", "", "", "", invalid(userField, "%q is not user[:group]", imageUser)
		}
		userArg, groupArg, _ = strings.Cut(imageUser, ":")
	}
	if userArg == "" {
		userArg = "0"
	}
	if g := sc.GetRunAsGroup(); g != nil {
		if sc.GetRunAsUser() == nil && sc.GetRunAsUsername() == "" {
			return "", "", "", "", invalid(secField+".run_as_group", "is set without run_as_user or run_as_username")
		}
		groupArg, groupField = strconv.FormatInt(g.GetValue(), 10), secField+".run_as_group"
	}
	return userArg, groupArg, userField, groupField, nil
}

// UserDB is what a rootfs's /etc/passwd and /etc/group say (either may be absent).
// For an image's fresh writable layer it depends only on the image's layers (their
// chain id), so callers may keep it. It keeps only names and ids, and each group's
// non-empty member names in one string: a crafted group file of millions of empty
// members (containerd's CVE-2026-47262) costs no more than its size, once.
type UserDB struct {
	users  []dbUser
	groups []dbGroup
	bytes  int
}

type dbUser struct {
	name     string
	uid, gid int
}

type dbGroup struct {
	name    string
	gid     int
	members string // ",alice,bob,"
}

// Bytes is about how much memory db holds.
func (db *UserDB) Bytes() int { return db.bytes }

// ReadUserDB reads the files with containerd's reader (oci.UserFromFS, GIDFromFS):
// it resolves symlinks inside the rootfs (an absolute link stays in it), accepts
// only regular files and caps their size. The filters collect every entry. A file
// that cannot be parsed is InvalidArgument.
func ReadUserDB(rootfs string) (*UserDB, error) {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, fmt.Errorf("open rootfs: %w", err)
	}
	defer root.Close()
	db := &UserDB{}
	_, err = oci.UserFromFS(root.FS(), func(u user.User) bool {
		db.users = append(db.users, dbUser{name: strings.Clone(u.Name), uid: u.Uid, gid: u.Gid})
		db.bytes += len(u.Name) + 40
		return false
	})
	if err != nil && !errors.Is(err, oci.ErrNoUsersFound) && !errors.Is(err, fs.ErrNotExist) {
		return nil, userFileError("/etc/passwd", err)
	}
	var members strings.Builder
	_, err = oci.GIDFromFS(root.FS(), func(g user.Group) bool {
		members.Reset()
		for _, m := range g.List {
			if m != "" {
				members.WriteString("," + m)
			}
		}
		if members.Len() > 0 {
			members.WriteString(",")
		}
		db.groups = append(db.groups, dbGroup{name: strings.Clone(g.Name), gid: g.Gid, members: members.String()})
		db.bytes += len(g.Name) + members.Len() + 48
		return false
	})
	if err != nil && !errors.Is(err, oci.ErrNoGroupsFound) && !errors.Is(err, fs.ErrNotExist) {
		return nil, userFileError("/etc/group", err)
	}
	return db, nil
}

// userFileError: an error of the system stays what it is; anything else is the
// image's fault (too long a line, too large, not a regular file, links that loop or
// run through a file).
func userFileError(name string, err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) && errno != syscall.ELOOP && errno != syscall.ENOTDIR && errno != syscall.ENAMETOOLONG {
		return fmt.Errorf("read the image's %s: %w", name, err)
	}
	return invalid("image", "its %s cannot be read: %v", name, err)
}

// lookupUser resolves a uid or name. A uid without passwd entry gets gid 0.
func (db *UserDB) lookupUser(arg, field string) (User, error) {
	uid, numeric, err := parseID(arg)
	if err != nil {
		return User{}, invalid(field, "user %q: %v", arg, err)
	}
	for _, u := range db.users {
		if (numeric && u.uid == int(uid)) || (!numeric && u.name == arg) {
			return User{UID: uint32(u.uid), GID: uint32(u.gid), Username: u.name}, nil
		}
	}
	if !numeric {
		return User{}, invalid(field, "user %q not found in the image's /etc/passwd", arg)
	}
	return User{UID: uid}, nil
}

// lookupGroup resolves a gid or group name.
func (db *UserDB) lookupGroup(arg, field string) (uint32, error) {
	gid, numeric, err := parseID(arg)
	if err != nil {
		return 0, invalid(field, "group %q: %v", arg, err)
	}
	if numeric {
		return gid, nil
	}
	for _, g := range db.groups {
		if g.name == arg {
			return uint32(g.gid), nil
		}
	}
	return 0, invalid(field, "group %q not found in the image's /etc/group", arg)
}

// groupsOf is the gids of the groups that list name as a member.
func (db *UserDB) groupsOf(name string) []uint32 {
	var out []uint32
	for _, g := range db.groups {
		if strings.Contains(g.members, ","+name+",") {
			out = append(out, uint32(g.gid))
		}
	}
	return out
}

// parseID reads a numeric id in [0, MaxInt32]; numeric is false for a name.
func parseID(s string) (id uint32, numeric bool, err error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, true, fmt.Errorf("out of range")
		}
		return 0, false, nil
	}
	if v < 0 || v > math.MaxInt32 {
		return 0, true, fmt.Errorf("out of range")
	}
	return uint32(v), true, nil
}
