#!/bin/bash
# device-16.sh [PART...]: issue 16's evidence matrix on the device machine
# (16 cores, H100), from the directory device-16-build.sh filled; every
# log and results directory under $OUT (or ./out). Parts, in the order
# given (default: sw cuda, which together stay under 9.5 minutes):
#   sw       in process, software back end: 1, 4 and 16 GiB vGPUs, the dirty
#            profile after the pre-copy — the same dirty bytes (16 MiB,
#            160 MiB) and 0.1/1/10 % of the pages — oneshot and iterative
#            with the guest-write log and with the full hash side by side,
#            stopcopy at 1 %; then both runs' tables and plots together
#   cuda     gmig-nvbench migrate, the CUDA back end: the same sizes and
#            dirty amounts, oneshot with the log and without, side by side
#   qemu     real VMs under KVM: two gmigd daemons, QEMU and the Linux guest
#            from the unpacked bundle QEMU_DIR (QEMU_DIR/cache/qemu-root and
#            QEMU_DIR/cache/guest/{vmlinuz,initramfs.cpio}); the guest's
#            CPU writing 16 and 160 MiB regions, oneshot with the log and
#            without, stopcopy
#   streams  the stop phase's GB/s on 1, 2, 4 and 8 streams against the
#            loopback rate of as many streams (BenchmarkStopEfficiency)
# Each migration's row is printed as it finishes; the tables are in
# $OUT/*/results.md and $OUT/cuda.log.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
parts=${*:-sw cuda}
MEMS=${MEMS:-1G,4G,16G}
DIRTY_PROFILES=${DIRTY_PROFILES:-dirty:bytes=16M,dirty:bytes=160M,dirty:pct=0.1,dirty:pct=1,dirty:pct=10}
DEADLINE=${DEADLINE:-570} # seconds for all parts (the device call's limit is 600)
echo "$(nproc) cores; $(free -g | awk '/^Mem/ {print $2}') GiB; parts: $parts; deadline ${DEADLINE}s"
(nvidia-smi -L; uname -r) >"$OUT/env.log" 2>&1

# rows: one line per migration from gmig-bench's progress (stderr).
rows() {
	awk '/^\[[0-9]+\/[0-9]+\]/ {h = $0; sub(/ run [0-9]+:.*/, "", h)}
	/^    pre-copy/ {d = $0; sub(/.*; downtime /, "", d); sub(/, guest gap.*/, "", d); print h ": " d; fflush()}
	/^gmig-bench:/ {print; fflush()}'
}

# bench NAME LIMIT ARGS...: gmig-bench under LIMIT seconds, results in $OUT/NAME.
bench() {
	name=$1 limit=$2
	shift 2
	timeout "$limit" ./gmig-bench -out "$OUT/$name" "$@" 2> >(tee "$OUT/$name.err" | rows) >"$OUT/$name.txt"
	echo "$name rc=$? (${SECONDS}s)"
}

n=$(wc -w <<<"$parts")
for part in $parts; do
	case $part in
	sw)
		# 60 % of what is left when other parts follow; of that, 88 % for the
		# log/hash matrix, the rest (and what it leaves) for stopcopy.
		share=$(((DEADLINE - SECONDS) * (n > 1 ? 6 : 10) / 10))
		end=$((SECONDS + share))
		bench sw "$((share * 88 / 100))" -mems "$MEMS" -mem-profile "$DIRTY_PROFILES" -profiles "" \
			-strategies oneshot,iterative -compare-tracking
		bench sw-stopcopy "$((end - SECONDS))" -mems "$MEMS" -mem-profile dirty:pct=1 -profiles "" -strategies stopcopy
		./gmig-bench -replot "$OUT/sw/results.json,$OUT/sw-stopcopy/results.json" -out "$OUT/sw-all" >"$OUT/sw-all.txt" 2>&1
		echo "sw-all: tables and plots of both rc=$?"
		;;
	cuda)
		lim=$(((DEADLINE - SECONDS) / n))
		timeout "$lim" ./gmig-nvbench migrate -skip-workload -sizes "$MEMS" -dirty 16M,160M,0.001,0.01,0.1 \
			-strategies oneshot -tracking both 2>&1 | tee "$OUT/cuda.log" | cut -c1-170
		echo "cuda rc=${PIPESTATUS[0]} (${SECONDS}s)"
		;;
	qemu)
		QEMU_DIR=${QEMU_DIR:-$PWD}
		if [ ! -d "$QEMU_DIR/cache/qemu-root" ] || [ ! -f "$QEMU_DIR/cache/guest/initramfs.cpio" ]; then
			echo "qemu: no bundle at QEMU_DIR=$QEMU_DIR (cache/qemu-root, cache/guest/initramfs.cpio): skipped"
		else
			bench qemu "$(((DEADLINE - SECONDS) / n))" -inproc=false -qemu -cache "$QEMU_DIR/cache" -gmigd "$PWD/gmigd" \
				-qemu-mems "$MEMS" -qemu-profiles cpu:mem=16M:rate=400,cpu:mem=160M:rate=1600 \
				-strategies oneshot,stopcopy -compare-tracking -qemu-warmup 1s -qemu-budget 20s
		fi
		;;
	streams)
		if ./orchestrator.test -test.list 'BenchmarkStopEfficiency' | grep -q .; then
			timeout "$(((DEADLINE - SECONDS) / n))" ./orchestrator.test -test.run '^$' -test.bench StopEfficiency \
				-test.benchtime 10x 2>&1 | tee "$OUT/streams.log" | grep -E 'streams=|^ok|FAIL'
			echo "streams rc=${PIPESTATUS[0]} (${SECONDS}s)"
		else
			echo "streams: this build has no BenchmarkStopEfficiency: skipped"
		fi
		;;
	*)
		echo "unknown part $part (want sw, cuda, qemu, streams)"
		;;
	esac
	n=$((n - 1))
done
