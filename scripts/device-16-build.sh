#!/bin/sh
# device-16-build.sh DIR: builds, without cgo, what device-16.sh runs on
# the device machine into DIR (default .devcarry-16): gmig-bench,
# gmig-nvbench, gmigd (the real-VM part's two daemons) and the
# orchestrator's test binary (the stop phase's rate on 1-8 streams beside
# the loopback's, BenchmarkStopEfficiency, where the tree has it), and the
# script itself. The device machine has no Go toolchain: carry DIR there
# and run bash DIR/device-16.sh (docs/benchmarks.md §8).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$top/.devcarry-16}
rm -rf "$out"
mkdir -p "$out"
cd "$top"
export GOOS=linux GOARCH=amd64 CGO_ENABLED=0
for c in gmig-bench gmig-nvbench gmigd; do
	go build -trimpath -ldflags='-s -w' -o "$out/$c" "./cmd/$c"
done
go test -c -trimpath -ldflags='-s -w' -o "$out/orchestrator.test" ./orchestrator
cp scripts/device-16.sh "$out/"
du -sh "$out"
