package pause

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// rootfsDirs are the mount points runc needs in a pause container's root: they exist
// in the shared root, which is read-only to every pod, so runc never writes to it.
var rootfsDirs = []string{"dev", "proc", "sys"}

// WriteRootfs makes, below parent, a directory holding the built-in image's files as
// a pause container's root: /pause (the image's entrypoint) and the mount points
// runc needs. Every pod's pause container can run from it read-only, with no
// snapshot, overlay mount or writable layer of its own: pause writes nothing.
//
// The directory's name is the binary's digest, so a shimd with another pause binary
// makes another one and never changes a directory a running pod uses. It is written
// in a temporary directory first and renamed into place, so a crash leaves either
// the whole directory or none (and a temporary one, removed by the next call).
// It returns the directory.
func WriteRootfs(parent string) (string, error) {
	sum := sha256.Sum256(binary)
	dir := filepath.Join(parent, hex.EncodeToString(sum[:8]))
	if ok, err := rootfsComplete(dir); err != nil || ok {
		return dir, err
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("pause rootfs: %w", err)
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", fmt.Errorf("pause rootfs: %w", err)
	}
	if err := writeRootfs(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("pause rootfs: %w", err)
	}
	// An incomplete directory of this name cannot exist (it is only ever renamed
	// into place whole), but one made by hand may: replace it.
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("pause rootfs: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("pause rootfs: %w", err)
	}
	return dir, nil
}

func writeRootfs(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	for _, d := range rootfsDirs {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, "pause"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	_, err = f.Write(binary)
	if err == nil {
		err = f.Sync() // the rename below must not publish a file whose data is lost
	}
	return errors.Join(err, f.Close())
}

// rootfsComplete tells whether dir holds the binary, whole, and the mount points.
func rootfsComplete(dir string) (bool, error) {
	got, err := os.ReadFile(filepath.Join(dir, "pause"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pause rootfs: %w", err)
	}
	if sha256.Sum256(got) != sha256.Sum256(binary) {
		return false, nil
	}
	for _, d := range rootfsDirs {
		if fi, err := os.Stat(filepath.Join(dir, d)); err != nil || !fi.IsDir() {
			return false, nil
		}
	}
	return true, nil
}
