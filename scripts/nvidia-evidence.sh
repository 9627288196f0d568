#!/bin/bash
# nvidia-evidence.sh: run on the device machine from the directory
# nvidia-build.sh filled; writes every log under $OUT (or ./out). Each step
# has its own time limit and the whole stays under ten minutes; the
# downtime matrix prints each size's rows as soon as they are done.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
step() { # step NAME LIMIT CMD...: run CMD under LIMIT seconds into $OUT/NAME.log
	name=$1 limit=$2
	shift 2
	timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
	echo "$name rc=$? ($SECONDS s)"
}
(nvidia-smi -L; nvcc --version | tail -1) >"$OUT/env.log" 2>&1
step nvcc 60 sh build.sh "$OUT/kernels.ptx"
step engine 150 ./engine.test -test.v -test.run 'TestNVIDIAMatchesSoftware|TestNVIDIAEngineModel|TestNVIDIAGuestModule'
step nvidia 60 ./nvidia.test -test.v -test.run 'TestGPUHash'
step sim 120 ./sim.test -test.v -test.run CUDA
step nvml-gonvml 30 ./nvml-gonvml.test -test.v
step nvml-purego 30 ./nvml-purego.test -test.v
step hash 90 ./gmig-nvbench hash -device 1G,4G,16G -host 1G,4G
step aperture 60 ./gmig-nvbench aperture
step migrate-small 200 ./gmig-nvbench migrate -sizes 1G,4G -dirty 0.001,0.01,0.1
left=$((590 - SECONDS))
step migrate-16g "$left" ./gmig-nvbench migrate -skip-workload -sizes 16G -dirty 0.001,0.01,0.1 -strategies oneshot,oneshot+split,stopcopy
grep -hE '^(--- |ok|FAIL|PASS$)' "$OUT"/engine.log "$OUT"/nvidia.log "$OUT"/sim.log "$OUT"/nvml-*.log
cat "$OUT"/hash.log "$OUT"/aperture.log "$OUT"/migrate-small.log "$OUT"/migrate-16g.log
