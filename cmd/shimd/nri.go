package main

import (
	"context"
	"time"

	"github.com/containerd/log"
	nriapi "github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/shimd/shimd/container"
	"github.com/shimd/shimd/nri"
)

// newNRI makes the NRI adaptation of config section [nri]; nil when NRI is off. The
// container manager is made after it and handed over by cm.
func newNRI(cfg NRIConfig, cdiRegistry container.CDIRegistry, cm func() *container.Manager) (*nri.NRI, error) {
	if !cfg.Enabled {
		log.L.Info("NRI is off (config key nri.enabled)")
		return nil, nil
	}
	var injectCDI func(*specs.Spec, []string) error
	if cdiRegistry != nil {
		injectCDI = func(sp *specs.Spec, devices []string) error {
			_, err := cdiRegistry.InjectDevices(sp, devices...)
			return err
		}
	}
	return nri.New(nri.Options{
		InjectCDI: injectCDI,
		Name:      "shimd", Version: version,
		SocketPath: cfg.SocketPath, PluginPath: cfg.PluginPath, PluginConfigPath: cfg.PluginConfigPath,
		DisableConnections:  cfg.DisableConnections,
		RegistrationTimeout: time.Duration(cfg.PluginRegistrationTimeout), RequestTimeout: time.Duration(cfg.PluginRequestTimeout),
		State: func(ctx context.Context) ([]*nriapi.PodSandbox, []*nriapi.Container, error) {
			return cm().NRI().State(ctx)
		},
		Update: func(ctx context.Context, u []*nriapi.ContainerUpdate) ([]*nriapi.ContainerUpdate, error) {
			return cm().NRI().Update(ctx, u)
		},
	})
}

// startNRI starts the plugins once recovery is done; NRI failing to start leaves
// shimd running without plugins.
func startNRI(ctx context.Context, n *nri.NRI) {
	if n == nil {
		return
	}
	if err := n.Start(); err != nil {
		log.G(ctx).WithError(err).Error("NRI plugins not started (check config keys nri.socket_path and nri.plugin_path)")
		return
	}
	log.G(ctx).Info("NRI started")
}
