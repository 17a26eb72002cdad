package main

import (
	"context"

	"github.com/shimd/shimd/runtime"
	"github.com/shimd/shimd/streaming"
)

// startStreaming starts the Exec/Attach/PortForward server, whose sessions the runtime
// service runs, and gives the service its URLs. It serves until ctx ends; stop closes
// it and every open session.
func startStreaming(ctx context.Context, cfg StreamingConfig, rs *runtime.Service) (stop func(), err error) {
	srv, err := streaming.NewServer(streaming.Config{
		Address: cfg.Address, Port: cfg.Port, TLSCertFile: cfg.TLSCertFile, TLSKeyFile: cfg.TLSKeyFile,
	}, rs.StreamingBackend())
	if err != nil {
		return nil, err
	}
	rs.SetStreaming(srv)
	srv.Start(ctx)
	return srv.Stop, nil
}
