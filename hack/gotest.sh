#!/usr/bin/env bash
# hack/gotest.sh RUN [-v] GO-TEST-ARGS...: go test, its output as plain `go test` prints
# it (with -v: every line), each skipped test recorded with its reason in
# $SHIMD_SKIPS_DIR/RUN.jsonl (default bin/test-skips) for `make check`'s skip report
# (hack/testsum; the tests allowed to skip on CI's host class are in hack/ci-skips.txt).
set -euo pipefail
run=$1
shift
verbose=()
if [ "${1:-}" = -v ]; then
	verbose=(-v)
	shift
fi
GO=${GO:-go}
dir=${SHIMD_SKIPS_DIR:-bin/test-skips}
mkdir -p "$dir" bin
$GO build -o bin/testsum ./hack/testsum
$GO test -json "$@" | bin/testsum "${verbose[@]}" -skips "$dir/$run.jsonl"
