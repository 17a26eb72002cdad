package main

import (
	"github.com/containerd/log"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/shimd/shimd/container"
)

// newCDI makes the CDI registry of config section [cdi]: a cache of the spec files in
// cdi.spec_dirs that watches them (fsnotify) and refreshes on change, and the func that
// stops the watch (at shutdown). nil when CDI is off.
func newCDI(cfg CDIConfig) (container.CDIRegistry, func(), error) {
	if !cfg.Enabled {
		return nil, func() {}, nil
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(cfg.SpecDirs...), cdi.WithAutoRefresh(true))
	if err != nil {
		return nil, nil, err
	}
	for path, errs := range cache.GetErrors() {
		for _, e := range errs {
			log.L.WithError(e).WithField("file", path).Warn("CDI spec file")
		}
	}
	log.L.WithField("dirs", cfg.SpecDirs).WithField("devices", len(cache.ListDevices())).Info("CDI devices")
	// The library stops its watch (goroutines and inotify descriptor) when
	// reconfigured without auto-refresh.
	stop := func() { _ = cache.Configure(cdi.WithAutoRefresh(false)) }
	return cache, stop, nil
}
