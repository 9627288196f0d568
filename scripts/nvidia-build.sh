#!/bin/sh
# nvidia-build.sh DIR: builds, without cgo, everything the NVIDIA evidence
# run needs into DIR (default .devcarry): the cuda-tagged test binaries of
# engine, engine/nvidia and internal/sim, gmig-nvbench, the NVML inventory test (with cgo,
# through go-nvml, and without, through purego), and the device-side script
# nvidia-evidence.sh. The device machine has no Go toolchain; carry DIR
# there and run bash DIR/nvidia-evidence.sh (docs/nvidia.md, "Evidence").
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$top/.devcarry}
rm -rf "$out"
mkdir -p "$out"
cd "$top"
export GOOS=linux GOARCH=amd64
CGO_ENABLED=0 go test -c -tags cuda -ldflags='-s -w' -o "$out/engine.test" ./engine
CGO_ENABLED=0 go test -c -tags cuda -ldflags='-s -w' -o "$out/nvidia.test" ./engine/nvidia
CGO_ENABLED=0 go test -c -tags cuda -ldflags='-s -w' -o "$out/sim.test" ./internal/sim
CGO_ENABLED=0 go build -ldflags='-s -w' -o "$out/gmig-nvbench" ./cmd/gmig-nvbench
CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$out/nvml-purego.test" ./internal/nvml
CGO_ENABLED=1 go test -c -ldflags='-s -w' -o "$out/nvml-gonvml.test" ./internal/nvml
cp engine/nvidia/cuda/kernels.cu engine/nvidia/cuda/build.sh scripts/nvidia-evidence.sh "$out/"
du -sh "$out"
