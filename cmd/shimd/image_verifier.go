package main

import (
	"fmt"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/containerd/containerd/v2/pkg/imageverifier"
	"github.com/containerd/containerd/v2/pkg/imageverifier/bindir"
)

// imageVerifier is containerd's bindir image verifier over the registry keys
// image_verifier_dir, max_image_verifiers and image_verifier_timeout; nil when the
// directory is "". The verifier's Config holds its timeout in a type internal to
// containerd, so the Config is filled from its TOML form, as containerd fills it
// from its own config file.
func imageVerifier(r RegistryConfig) (imageverifier.ImageVerifier, error) {
	if r.ImageVerifierDir == "" {
		return nil, nil
	}
	text := fmt.Sprintf("bin_dir = %q\nmax_verifiers = %d\nper_verifier_timeout = %q\n",
		r.ImageVerifierDir, r.MaxImageVerifiers, time.Duration(r.ImageVerifierTimeout).String())
	var c bindir.Config
	if _, err := toml.Decode(text, &c); err != nil {
		return nil, fmt.Errorf("config keys registry.image_verifier_*: %w", err)
	}
	return bindir.NewImageVerifier(&c), nil
}
