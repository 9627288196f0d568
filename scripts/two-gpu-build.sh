#!/bin/sh
# two-gpu-build.sh DIR: builds, without cgo, what the two-GPU run needs into
# DIR (default .devcarry-2gpu): gmigd, gmig-nvbench and the device-side
# script two-gpu.sh. The device machine has no Go toolchain; carry DIR to
# a machine with two NVIDIA GPUs and run bash DIR/two-gpu.sh
# (docs/nvidia.md, "Two GPUs").
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$top/.devcarry-2gpu}
rm -rf "$out"
mkdir -p "$out"
cd "$top"
export GOOS=linux GOARCH=amd64 CGO_ENABLED=0
go build -ldflags='-s -w' -o "$out/gmigd" ./cmd/gmigd
go build -ldflags='-s -w' -o "$out/gmig-nvbench" ./cmd/gmig-nvbench
cp scripts/two-gpu.sh "$out/"
du -sh "$out"
