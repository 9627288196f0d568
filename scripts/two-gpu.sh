#!/bin/bash
# two-gpu.sh: run on a machine with two NVIDIA GPUs from the directory
# two-gpu-build.sh filled; every log goes under $OUT (or ./out) and each
# result is printed as soon as its step ends. Each step has its own time
# limit and the whole stays under ten minutes.
#  1. ownership: two gmigd serve, one per GPU (-gpu 0, -gpu 1), each with a
#     cuda vGPU; gmigd status shows which owns which; a third asking for
#     GPU 0 is refused, naming the first.
#  2. a CUDA vGPU migrated GPU 0 -> 1 -> 0 under the guest's checked
#     workload (gmig-nvbench migrate -gpus 0,1 -round-trip): digest equal
#     to a never-migrated run.
#  3. downtime (pause -> resume) for $SIZES at 1 % dirty, the same GPU and
#     two GPUs one after the other for each size, then their transfer
#     terms side by side.
# With GMIG_CUDA_MODEL=2 (the model of two GPUs) and small SIZES and WMEM
# it runs anywhere, to check the script itself; its timings mean nothing.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-$PWD/out}
SIZES=${SIZES:-1G 4G 16G}
WMEM=${WMEM:-256M}
STRATEGIES=${STRATEGIES:-oneshot,oneshot+split}
mkdir -p "$OUT"
left() { # seconds left of the ten minutes (at least 1)
	l=$((590 - SECONDS))
	echo $((l < 1 ? 1 : l))
}
step() { # step NAME LIMIT CMD...: run CMD under LIMIT seconds into $OUT/NAME.log, then print it
	name=$1 limit=$2
	shift 2
	timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
	rc=$?
	echo "== $name rc=$rc ($SECONDS s)"
	cat "$OUT/$name.log"
	return $rc
}
if [ -z "${GMIG_CUDA_MODEL:-}" ]; then
	nvidia-smi -L | tee "$OUT/env.log"
	if [ "$(nvidia-smi -L | grep -c '^GPU ')" -lt 2 ]; then
		echo "two-gpu.sh: needs two GPUs"
		exit 2
	fi
fi

# 1. Ownership. The locks live under $OUT, not /run/gmig-gpus, so nothing
# is left on the machine.
locks=$OUT/gpu-locks
pids=()
stop_daemons() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	pids=()
}
trap stop_daemons EXIT
for i in 0 1; do
	./gmigd serve -run-dir "$OUT/gmigd$i" -gpu "$i" -gpu-lock-dir "$locks" -pool 512M -log-level info >"$OUT/gmigd$i.log" 2>&1 &
	pids+=($!)
done
for i in 0 1; do # until its control socket answers (30 s at most)
	for _ in $(seq 300); do
		./gmigd vgpu list -run-dir "$OUT/gmigd$i" >/dev/null 2>&1 && break
		sleep 0.1
	done
done
for i in 0 1; do
	step "vgpu$i" 60 ./gmigd vgpu create "g$i" -run-dir "$OUT/gmigd$i" -mem 256M -backend cuda
done
step status 30 ./gmigd status -gpu-lock-dir "$locks"
[ -z "${GMIG_CUDA_MODEL:-}" ] && step smi 30 nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv
if step third 30 ./gmigd serve -run-dir "$OUT/gmigd-third" -gpu 0 -gpu-lock-dir "$locks" -pool 64M; then
	echo "two-gpu.sh: a third gmigd took GPU 0"
fi
stop_daemons

# 2. The workload migrated 0 -> 1 -> 0.
step workload 240 ./gmig-nvbench migrate -gpus 0,1 -round-trip -skip-downtime -workload-mem "$WMEM"

# 3. Downtime, same GPU then two GPUs, size by size.
for s in $SIZES; do
	for g in 0,0 0,1; do
		step "downtime-$s-gpus${g/,/-}" "$(left)" ./gmig-nvbench migrate -skip-workload -gpus "$g" -sizes "$s" -dirty 0.01 -strategies "$STRATEGIES"
	done
done
echo "== transfer term (ms) and downtime (ms), 1 % dirty: same GPU | two GPUs"
for s in $SIZES; do
	for st in ${STRATEGIES//,/ }; do
		row() { awk -v st="$st" '$3 == st && $2 ~ /%$/ { print $7, $4 }' "$OUT/downtime-$s-gpus$1.log"; }
		printf '%5s %-14s %s | %s\n' "$s" "$st" "$(row 0-0)" "$(row 0-1)"
	done
done
