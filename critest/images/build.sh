#!/usr/bin/env bash
# Builds the offline image set (critest/images/README.md) into the registry
# storage /var/cache/shimd/registry, unless it is up to date. Run as root.
#   critest/images/build.sh            build if the sources changed
#   critest/images/build.sh -force     rebuild and push everything
#   critest/images/build.sh -clean     empty the storage first
#   critest/images/build.sh -list      also print name, digest, description
set -euo pipefail
cd "$(dirname "$0")/../.."
exec go run ./critest/images/cmd/mkimages "$@"
