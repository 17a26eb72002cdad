package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containernetworking/cni/libcni"
	"github.com/fsnotify/fsnotify"
)

// confExtensions are the file names libcni (and containerd) read in a conf dir.
var confExtensions = []string{".conf", ".conflist", ".json"}

// ErrNoConfig is Ready's error while ConfDir holds no network config.
var ErrNoConfig = errors.New("no CNI network config")

// Reload reads the network config again from ConfDir: the first file by name. A
// file that does not parse keeps the last good config in use and is reported by
// ConfigWarning; an empty directory unloads the network (Ready fails).
func (c *CNI) Reload() {
	list, file, err := loadFirst(c.opts.ConfDir)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil:
		c.list, c.listFile, c.loadErr = list, file, nil
		c.noPorts = withoutPortmap(list)
	case errors.Is(err, ErrNoConfig):
		c.list, c.noPorts, c.listFile, c.loadErr = nil, nil, "", err
	default:
		c.loadErr = err
	}
}

// Ready reports whether a network config is loaded, reloading it if not.
func (c *CNI) Ready() error {
	_, err := c.network()
	return err
}

// ConfigWarning describes a config file that failed to load while an older one stays
// in use; "" when there is none.
func (c *CNI) ConfigWarning() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.list == nil || c.loadErr == nil {
		return ""
	}
	return fmt.Sprintf("%v; still using network %q from %s", c.loadErr, c.list.Name, c.listFile)
}

// Describe is the network in use as JSON, for verbose Status (crictl info):
// {"name", "file", "error"}, the last a failed load's error.
func (c *CNI) Describe() string {
	c.mu.Lock()
	d := struct {
		Name  string `json:"name"`
		File  string `json:"file"`
		Error string `json:"error,omitempty"`
	}{File: c.listFile}
	if c.list != nil {
		d.Name = c.list.Name
	}
	if c.loadErr != nil {
		d.Error = c.loadErr.Error()
	}
	c.mu.Unlock()
	b, _ := json.Marshal(d)
	return string(b)
}

// networkFor is the config list to attach or detach a with: the one in use, less
// its portmap plugins when a maps no port (see withoutPortmap).
func (c *CNI) networkFor(a Attachment) (*libcni.NetworkConfigList, error) {
	list, noPorts, err := c.networks()
	if err == nil && noPorts != nil && len(a.PortMappings) == 0 {
		return noPorts, nil
	}
	return list, err
}

// network is the config list in use.
func (c *CNI) network() (*libcni.NetworkConfigList, error) {
	list, _, err := c.networks()
	return list, err
}

// networks is the config list in use and, read with it, that list less its portmap
// plugins (nil when it has none), loading the config first if none is loaded.
func (c *CNI) networks() (list, noPorts *libcni.NetworkConfigList, err error) {
	c.mu.Lock()
	loaded := c.list != nil
	c.mu.Unlock()
	if !loaded {
		c.Reload()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.list == nil {
		// A request that needs the network waits for the node's network add-on:
		// FailedPrecondition, not a fault of shimd's.
		return nil, nil, fmt.Errorf("the pod network is not ready: %w: %w", c.loadErr, errdefs.ErrFailedPrecondition)
	}
	return c.list, c.noPorts, nil
}

// withoutPortmap is list less its plugins of type portmap, for pods that map no
// port; nil when list has none (or nothing but them). The standard portmap plugin
// does nothing for such a pod: ADD hands its previous result on, CHECK and DEL
// return at once (containernetworking/plugins, portmap's cmdAdd, cmdCheck and
// cmdDel, from v0.7 to v1.9). Not running it saves a Go program's exec per pod
// start and stop, about 2.6 ms of CPU on an idle core, more in a burst, on the
// path every pod waits on. The list keeps its name, so ADD caches the shorter list
// under the same network and DEL reads it back from the cache.
func withoutPortmap(list *libcni.NetworkConfigList) *libcni.NetworkConfigList {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(list.Bytes, &raw); err != nil {
		return nil
	}
	var plugins []json.RawMessage
	if err := json.Unmarshal(raw["plugins"], &plugins); err != nil || len(plugins) != len(list.Plugins) {
		return nil
	}
	var keep []json.RawMessage
	for i, p := range list.Plugins {
		if p.Network.Type != "portmap" {
			keep = append(keep, plugins[i])
		}
	}
	if len(keep) == len(plugins) || len(keep) == 0 {
		return nil
	}
	b, err := json.Marshal(keep)
	if err != nil {
		return nil
	}
	raw["plugins"] = b
	if b, err = json.Marshal(raw); err != nil {
		return nil
	}
	out, err := libcni.ConfListFromBytes(b)
	if err != nil {
		return nil
	}
	return out
}

// loadFirst loads the first config file by name in dir.
func loadFirst(dir string) (*libcni.NetworkConfigList, string, error) {
	files, err := libcni.ConfFiles(dir, confExtensions)
	if err != nil {
		return nil, "", fmt.Errorf("cni config dir %s (config key cni.conf_dir): %w", dir, err)
	}
	for _, f := range files {
		var list *libcni.NetworkConfigList
		if strings.HasSuffix(f, ".conflist") {
			list, err = libcni.ConfListFromFile(f)
		} else {
			var conf *libcni.NetworkConfig
			conf, err = libcni.ConfFromFile(f)
			if err == nil {
				list, err = libcni.ConfListFromConf(conf)
			}
		}
		if err != nil {
			return nil, "", fmt.Errorf("invalid CNI network config %s: %w", f, err)
		}
		if len(list.Plugins) == 0 {
			continue
		}
		return list, f, nil
	}
	return nil, "", fmt.Errorf("%w in %s (config key cni.conf_dir)", ErrNoConfig, dir)
}

// Watch reloads the network config whenever a file in ConfDir is created, written,
// renamed or removed (after a quiet period of settle, so an editor's several writes
// make one reload) until ctx ends. ConfDir is created if missing. The caller owns the
// goroutine that runs Watch and waits for it at shutdown.
func (c *CNI) Watch(ctx context.Context, settle time.Duration) error {
	if err := os.MkdirAll(c.opts.ConfDir, 0o755); err != nil {
		return fmt.Errorf("create cni.conf_dir %s: %w", c.opts.ConfDir, err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch cni.conf_dir: %w", err)
	}
	defer w.Close()
	if err := w.Add(c.opts.ConfDir); err != nil {
		return fmt.Errorf("watch cni.conf_dir %s: %w", c.opts.ConfDir, err)
	}
	c.Reload() // anything written before the watch started
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op&(fsnotify.Create|fsnotify.Write|fsnotify.Rename|fsnotify.Remove) != 0 && isConfFile(ev.Name) {
				timer.Reset(settle)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			// An overflow loses events: reload to be sure.
			c.setLoadErr(fmt.Errorf("watch cni.conf_dir: %w", err))
			timer.Reset(settle)
		case <-timer.C:
			c.Reload()
		}
	}
}

func (c *CNI) setLoadErr(err error) {
	c.mu.Lock()
	c.loadErr = err
	c.mu.Unlock()
}

func isConfFile(name string) bool {
	ext := filepath.Ext(name)
	for _, e := range confExtensions {
		if ext == e {
			return true
		}
	}
	return false
}
