#!/bin/bash
# hack/fsorder.sh: the kernel's cost of writing files as the pull benchmark's two sides
# do it, with no runtime: two directories take turns (A B B A A B B A ...), each turn
# copies /usr/share with a fresh cp into its directory, then removes it and syncs.
# Prints each copy's system and wall time and whose turn came before
# (docs/benchmarks.md, "Fresh memory on this machine"). Needs write access to /var/tmp.
set -e
base=$(mktemp -d /var/tmp/fsorder.XXXXXX)
mkdir -p $base/A/deep/root $base/B/deep/root
prev=
for side in A B B A A B B A A B B A; do
  d=$base/$side/deep/root/x
  t=$( { /usr/bin/time -f "%S %e" cp -a /usr/share $d ; } 2>&1 )
  echo "$side after ${prev:-none}: system wall = $t"
  rm -rf $d; sync
  prev=$side
done
rm -rf $base
