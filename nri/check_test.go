package nri

import nrigen "github.com/containerd/nri/pkg/runtime-tools/generate"

var _ nrigen.UnderlyingGenerator = (*specGen)(nil)
