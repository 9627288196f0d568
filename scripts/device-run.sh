#!/usr/bin/env bash
# device-run.sh [-n] [PARTS]: the device machine's VM run, from the
# directory scripts/device-build.sh filled (docs/nvidia.md, "Evidence: the
# VM run"). PARTS (default abc; also $PARTS) picks among:
#   a  native: each CUDA program on NVIDIA's libcuda
#   b  library in a host process: the same programs through gmig's
#      libcuda.so.1 on a cuda vGPU of `gmigd serve` (GMIG_CUDA_SOCKET),
#      outputs against native ("time:" lines left out), launchrate and
#      copybw side by side, vecadd.py both ways
#   c  QEMU/KVM: `gmigd demo -cuda-program` with a cuda vGPU (local memory,
#      guest modules) for each of $VM_MEMS, migrated mid-run between two
#      gmigd on the one GPU, against a never-migrated VM
#   d  issue 16's real VMs: gmig-bench -qemu (the guest-write log)
#   e  the same with -no-tracking (the full hash), to compare with d
#   f  the GPU workers on the GPU: the hostile scribble contained
#      (cudadrv TestScribbleContainedByWorkersGPU), the bulk buffer's DMA
#      (nvidia TestLocalBulkGPU), the local tracker's stop-phase costs at
#      $LOCAL_TIMES GiB (TestLocalTrackerTimes; default 1,16); for the
#      workers' cost, run b twice, GPU_ISOLATION=shared and the default
#      (process), and compare
#   g  issue 18's programs in VMs: for each of $VM_PROGRAMS (vecadd matmul
#      streams vecadd.py) one `gmigd demo -cuda-program` with a cuda vGPU
#      (guest modules, local memory $G_LOCAL, default 1G), migrated mid-run
#      against a never-migrated VM: its downtime and "identical" or
#      "DIFFERENT"; vecadd.py runs on this machine's python3 and
#      cuda-python, packed into an initramfs layer (pyguest.py)
# c's VMs: VM_MEMS (local memory sizes), VM_LIMIT (each VM step's limit,
# s; 240), VM_ITERS (cuda-streams' iterations; 300), VM_PROGRAM (another
# program), VM_LINES, VM_FLAGS. g's: VM_PROGRAMS, G_LOCAL, G_LIMIT (each
# program's limit, s; 120), G_ARGS_vecadd, G_ARGS_matmul, G_ARGS_streams,
# G_ARGS_vecadd_py (the program's arguments, comma-separated), VM_FLAGS.
# -n (or DRY=1): what runs without a GPU: a is skipped, b, c and g run the
# cuda back end on its software model (GMIG_CUDA_MODEL=1), c, d, e and g
# with small sizes (g's vecadd.py on cmd/libcuda/testdata/fakebindings,
# a stand-in cuda.bindings over gmig's libcuda.so.1, where python3 has no
# cuda-python). BACKEND=software runs b and c on the software back end
# (no guest modules) instead of cuda; GUEST_MODULES=0 leaves them off the
# cuda vGPUs. Each step is time-limited and printed as it ends; the whole
# stays under $BUDGET s (570). Logs go to $OUT (default ./out): summary.txt
# and logs.tar.gz, remade after every step.
set -u
if [ "${1:-}" = -h ]; then
	sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 0
fi
cd "$(dirname "$0")"
DIR=$PWD
DRY=${DRY:-0}
if [ "${1:-}" = -n ]; then
	DRY=1
	shift
fi
PARTS=${1:-${PARTS:-abc}}
OUT=${OUT:-$DIR/out}
BUDGET=${BUDGET:-570}
LOGS=$DIR/logs
WORK=$(mktemp -d /tmp/gmig-devrun-XXXXXX)
mkdir -p "$OUT" "$LOGS"
exec > >(tee -a "$OUT/summary.txt") 2>&1
if [ "$DRY" = 1 ]; then
	export GMIG_CUDA_MODEL=1
	VM_MEMS=${VM_MEMS:-16M}
	BENCH_MEMS=${BENCH_MEMS:-64M}
	LIB_LOCAL=${LIB_LOCAL:-64M}
	LOCAL_TIMES=${LOCAL_TIMES:-}
	G_LOCAL=${G_LOCAL:-16M}
else
	VM_MEMS=${VM_MEMS:-1G 4G 16G}
	BENCH_MEMS=${BENCH_MEMS:-1G,4G,16G}
	LIB_LOCAL=${LIB_LOCAL:-1G}
	LOCAL_TIMES=${LOCAL_TIMES:-1,16}
	G_LOCAL=${G_LOCAL:-1G}
fi
# Each VM step's time limit (s): a 16 GiB one needs more than the default.
VM_LIMIT=${VM_LIMIT:-240}
# The evidence programs' arguments (cmd/libcuda/testdata; empty: theirs).
ARGS_probe=${ARGS_probe:-20 0}
ARGS_vecadd=${ARGS_vecadd:-}
ARGS_matmul=${ARGS_matmul:-}
ARGS_streams=${ARGS_streams:-10 0}
ARGS_launchrate=${ARGS_launchrate:-}
ARGS_copybw=${ARGS_copybw:-}
PROGRAMS="vecadd matmul streams launchrate copybw probe"
BACKEND=${BACKEND:-cuda}
VGPU_FLAGS="-backend $BACKEND"
[ "$BACKEND" = cuda ] && [ "${GUEST_MODULES:-1}" = 1 ] && VGPU_FLAGS="$VGPU_FLAGS -guest-modules"
[ "$BACKEND" = cuda ] && [ -n "${GPU_ISOLATION:-}" ] && VGPU_FLAGS="$VGPU_FLAGS -gpu-isolation $GPU_ISOLATION"

# pack remakes $OUT/logs.tar.gz from the logs so far (the device tool
# brings back few files: one archive, the summary).
pack() { tar -czf "$OUT/logs.tar.gz" -C "$DIR" logs 2>/dev/null; }

# step NAME LIMIT CMD...: CMD under min(LIMIT, what is left of BUDGET)
# seconds, its output in logs/NAME.log; prints NAME, rc and the time.
step() {
	local name=$1 limit=$2 left t0=$SECONDS rc
	shift 2
	left=$((BUDGET - SECONDS))
	[ "$limit" -gt "$left" ] && limit=$left
	if [ "$limit" -lt 5 ]; then
		echo "$name: skipped (the ${BUDGET} s budget is spent)"
		return 124
	fi
	timeout -k 5 "$limit" "$@" >"$LOGS/$name.log" 2>&1
	rc=$?
	echo "$name rc=$rc ($((SECONDS - t0)) s, at $SECONDS s)"
	[ $rc = 0 ] || tail -3 "$LOGS/$name.log" | sed "s/^/  $name: /"
	pack
	return $rc
}

# unxz SRC DST: lzma through python3 (xz may be missing on the device).
unxz_to() { python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' "$1" "$2"; }

setup() {
	[ -x gmigd ] || { unxz_to gmigd.xz gmigd && chmod +x gmigd; }
	[ -x gmig-bench ] || { unxz_to gmig-bench.xz gmig-bench && chmod +x gmig-bench; }
	if [ ! -x cache/qemu-root/usr/bin/qemu-system-x86_64 ]; then
		mkdir -p cache/guest
		python3 -c 'import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="tar")' qemu-root.tar.xz cache
		cp guest/vmlinuz cache/guest/
		unxz_to guest/initramfs.cpio.xz cache/guest/initramfs.cpio
	fi
	cache/qemu-root/lib64/ld-linux-x86-64.so.2 --library-path cache/qemu-root/lib/x86_64-linux-gnu \
		cache/qemu-root/usr/bin/qemu-system-x86_64 --version | head -1
	./gmigd version 2>&1 | head -1
	(uname -r; nvidia-smi -L; ls -l /dev/kvm; grep -c -wE 'vmx|svm' /proc/cpuinfo) 2>&1 | sed 's/^/  /'
}

# notime FILE: FILE's lines less "time:" lines.
notime() { grep -v '^time:' "$1"; }

# compare NAME: the library's stdout of NAME against native's.
compare() {
	local n=$LOGS/native-$1.out l=$LOGS/lib-$1.out
	if [ ! -f "$n" ]; then
		echo "  $1: no native run to compare with"
	elif diff <(notime "$n") <(notime "$l") >"$LOGS/diff-$1.txt"; then
		echo "  $1: library vs native (time: lines left out): identical ($(notime "$n" | wc -l) lines)"
	else
		echo "  $1: library vs native: DIFFERENT (logs/diff-$1.txt):"
		head -20 "$LOGS/diff-$1.txt" | sed 's/^/    /'
	fi
}

# ratios NAME: NAME's time: lines native and through the library, side by
# side, with the ratio of each line's last number (library / native).
ratios() {
	local n=$LOGS/native-$1.out l=$LOGS/lib-$1.out
	[ -f "$n" ] && [ -f "$l" ] || return 0
	paste -d '\t' <(grep '^time:' "$n") <(grep '^time:' "$l") | awk -F '\t' '
		function last(s,   a, i, k) { k = split(s, a, /[^0-9.eE+-]+/); for (i = k; i > 0; i--) if (a[i] ~ /^[0-9]/) return a[i] + 0; return 0 }
		{ r = last($1) ? sprintf("%.3f", last($2) / last($1)) : "?"
		  printf "  %s | native: %s | library: %s | library/native %s\n", "'"$1"'", $1, $2, r }'
}

# run_prog WHERE NAME ENV...: runs cuda-NAME (stdout to logs/WHERE-NAME.out).
run_prog() {
	local where=$1 p=$2 args
	shift 2
	args=ARGS_$p
	# shellcheck disable=SC2086 # the arguments are words
	step "$where-$p" 120 env "$@" ./cuda-$p ${!args}
	local rc=$?
	# The step's log holds both streams; .out the program's stdout alone.
	grep -v '^{"level":' "$LOGS/$where-$p.log" >"$LOGS/$where-$p.out"
	grep -E '^time:|result|digest' "$LOGS/$where-$p.out" | tail -6 | sed "s/^/  $where $p: /"
	return $rc
}

part_a() {
	echo "== a: native (NVIDIA's libcuda)"
	if [ "$DRY" = 1 ]; then
		echo "a: skipped: needs the GPU and NVIDIA's libcuda"
		return
	fi
	for p in $PROGRAMS; do
		[ -x "cuda-$p" ] && run_prog native "$p"
	done
	if [ -f vecadd.py ]; then
		step native-vecadd.py 120 python3 vecadd.py
		cp "$LOGS/native-vecadd.py.log" "$LOGS/native-vecadd.py.out"
		tail -3 "$LOGS/native-vecadd.py.out" | sed 's/^/  native vecadd.py: /'
	fi
}

# serve_lib NAME: `gmigd serve` (its log logs/NAME-gmigd.log) with one vGPU
# $VGPU_FLAGS -local-mem $LIB_LOCAL, for host processes on gmig's
# libcuda.so.1: sets SERVE_PID and SERVE_SOCK (the vGPU's socket).
serve_lib() {
	local name=$1 rd=$WORK/$1
	mkdir -p "$rd"
	./gmigd serve -run-dir "$rd" -pool 20G -gpu-lock-dir= -qemu-root "$DIR/cache/qemu-root" -log-level info >"$LOGS/$name-gmigd.log" 2>&1 &
	SERVE_PID=$!
	timeout 30 bash -c "until ./gmigd vgpu list -run-dir '$rd' >/dev/null 2>&1; do sleep 0.2; done" ||
		{ echo "$name: gmigd serve did not come up (logs/$name-gmigd.log)"; kill "$SERVE_PID"; return 1; }
	# shellcheck disable=SC2086 # VGPU_FLAGS are words
	if ! ./gmigd vgpu create "$name" -run-dir "$rd" $VGPU_FLAGS -local-mem "$LIB_LOCAL" >"$LOGS/$name-vgpu.json" 2>&1; then
		echo "$name: vgpu create failed: $(cat "$LOGS/$name-vgpu.json")"
		kill "$SERVE_PID"
		return 1
	fi
	SERVE_SOCK=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["socket"])' "$LOGS/$name-vgpu.json")
}

part_b() {
	echo "== b: the library in a host process (gmigd serve, a vGPU $VGPU_FLAGS -local-mem $LIB_LOCAL)"
	local sock pid
	serve_lib lib || return 1
	sock=$SERVE_SOCK pid=$SERVE_PID
	for p in $PROGRAMS; do
		[ -x "cuda-$p" ] || continue
		run_prog lib "$p" LD_LIBRARY_PATH="$DIR" GMIG_CUDA_SOCKET="$sock"
		compare "$p"
	done
	ratios launchrate
	ratios copybw
	if [ -f vecadd.py ]; then
		step lib-vecadd.py 120 env LD_LIBRARY_PATH="$DIR" GMIG_CUDA_SOCKET="$sock" python3 vecadd.py
		grep -v '^{"level":' "$LOGS/lib-vecadd.py.log" >"$LOGS/lib-vecadd.py.out"
		tail -3 "$LOGS/lib-vecadd.py.out" | sed 's/^/  library vecadd.py: /'
		compare vecadd.py
	fi
	kill "$pid"
	wait "$pid" 2>/dev/null
}

# bytes SIZE: SIZE (e.g. 16G, 64M) in bytes.
bytes() {
	local n=${1%[KMGkmg]}
	case $1 in
	*[Kk]) echo $((n << 10)) ;;
	*[Mm]) echo $((n << 20)) ;;
	*[Gg]) echo $((n << 30)) ;;
	*) echo "$n" ;;
	esac
}

part_c() {
	local prog m n
	echo "== c: QEMU/KVM: a CUDA program in a VM with a vGPU $VGPU_FLAGS, live-migrated between two gmigd on the one GPU, local memory $VM_MEMS"
	for m in $VM_MEMS; do
		# The guest's program: cuda-streams where the image has it, with
		# a ballast of 90 % of the local memory (less the streams'
		# buffers) allocated and filled
		# first, 1 % of the local memory (CHURN, the ballast's first
		# MiB) rewritten by the GPU every iteration (cuMemsetD32: no
		# host work, so iterations are ~100 ms apart even under TCG and
		# the pages change between the pre-copy's read of them and the
		# pause), checked word by word at the end, and the four streams'
		# own small buffers (N floats); VM_ITERS iterations 100 ms apart
		# outlast the migration, so it lands mid-run. Else the probe.
		n=65536
		bal=$((($(bytes "$m") * 9 / 10 - 48 * n) >> 20)) # the streams' 12 buffers fit beside it
		churn=$(($(bytes "$m") / 100 >> 20))
		[ "$churn" -gt 0 ] || churn=1
		if grep -qx /usr/bin/cuda-streams guest-programs.txt; then
			prog=${VM_PROGRAM:-/usr/bin/cuda-streams,${VM_ITERS:-300},100,$n,$bal,$churn}
		else
			prog=${VM_PROGRAM:-/usr/bin/cuda-probe,300,100}
		fi
		echo "  vm $m: $prog"
		# shellcheck disable=SC2086 # VGPU_FLAGS and VM_FLAGS are words
		step "vm-$m" "$VM_LIMIT" ./gmigd demo -cache "$DIR/cache" $VGPU_FLAGS -local-mem "$m" -guest-ram 1024 \
			-cuda-program "$prog" -program-lines "${VM_LINES:-6}" -log-level warn -keep ${VM_FLAGS:-}
		# The daemons' logs and the consoles, then the demo's files go.
		local files
		files=$(sed -n 's/.*; files in \(\/[^ ]*\)$/\1/p' "$LOGS/vm-$m.log" | head -1)
		if [ -n "$files" ] && [ -d "$files" ]; then
			mkdir -p "$LOGS/vm-$m"
			for f in "$files"/*/gmigd.log "$files"/*/vms/*/console.log; do
				[ -f "$f" ] && cp "$f" "$LOGS/vm-$m/$(echo "${f#"$files"/}" | tr / -)"
			done
			rm -rf "$files"
		fi
		grep -E 'accel|kvm|tcg:|downtime|final dirty|vgpu transfer|at the stop|tracking:|exit|identical|DIFFERENT|Error|error' "$LOGS/vm-$m.log" |
			grep -v '^  |' | head -20 | sed "s/^/  vm $m: /"
	done
}

# ---- part g: issue 18's programs, each migrated in a VM.
VM_PROGRAMS=${VM_PROGRAMS:-vecadd matmul streams vecadd.py}
G_LIMIT=${G_LIMIT:-120}
# Each program's arguments (ITERS PACE_MS as tests/cudaprogs_test.go runs
# them, more iterations): under TCG the VMs boot in ~15 s and the
# migration starts after G_LINES_* lines (a few iterations); at 100 ms an
# iteration the program runs on well past the migration's end.
G_ARGS_vecadd=${G_ARGS_vecadd:-65536,150,100}
G_ARGS_matmul=${G_ARGS_matmul:-64,150,100}
G_ARGS_streams=${G_ARGS_streams:-150,100,16384}
# vecadd.py computes its inputs and digests in Python: under TCG an
# iteration of 65536 floats takes seconds, so fewer floats.
G_ARGS_vecadd_py=${G_ARGS_vecadd_py:-4096,60,100}
# Lines before the migration: "NAME: n N" and 4 iterations (streams: 9
# lines an iteration).
G_LINES_vecadd=5 G_LINES_matmul=5 G_LINES_streams=37 G_LINES_vecadd_py=5

# py_layer: the guest image with this machine's python3 and what vecadd.py
# uses of it appended ($WORK/initramfs-py.cpio; the guest's command in
# $WORK/py-argv). It runs vecadd.py natively once to find what that is: on
# NVIDIA's libcuda, or (dry) on gmig's libcuda.so.1 over a vGPU of
# `gmigd serve` on the model, with the stand-in bindings where python3
# has no cuda-python.
py_layer() {
	local env=() pid=
	[ -f vecadd.py ] || { echo "  vecadd.py: not carried"; return 1; }
	[ -f pyguest.py ] || { echo "  vecadd.py: pyguest.py not carried"; return 1; }
	if ! python3 -c 'import importlib.util,sys; sys.exit(importlib.util.find_spec("cuda.bindings") is None)' 2>/dev/null; then
		if [ "$DRY" = 1 ] && [ -d "$DIR/../cmd/libcuda/testdata/fakebindings" ]; then
			env+=(PYTHONPATH="$DIR/../cmd/libcuda/testdata/fakebindings")
		else
			echo "  vecadd.py: $(command -v python3) has no cuda.bindings (pip install cuda-python): skipped"
			return 1
		fi
	fi
	if [ "$DRY" = 1 ]; then
		serve_lib pytrace || return 1
		pid=$SERVE_PID
		env+=(LD_LIBRARY_PATH="$DIR" GMIG_CUDA_SOCKET="$SERVE_SOCK")
	fi
	step g-pack-vecadd.py 120 env "${env[@]}" python3 pyguest.py pack --base cache/guest/initramfs.cpio \
		--out "$WORK/initramfs-py.cpio" --argv "$WORK/py-argv" vecadd.py 4096 1 0
	local rc=$?
	[ -n "$pid" ] && { kill "$pid"; wait "$pid" 2>/dev/null; }
	grep '^pyguest:' "$LOGS/g-pack-vecadd.py.log" | sed 's/^/  /'
	return $rc
}

part_g() {
	echo "== g: issue 18's programs ($VM_PROGRAMS), each in a VM with a vGPU $VGPU_FLAGS -local-mem $G_LOCAL, live-migrated mid-run between two gmigd, against a never-migrated VM"
	local p key prog args lines initrd files out after
	for p in $VM_PROGRAMS; do
		key=${p//./_}
		initrd=()
		if [ "$p" = vecadd.py ]; then
			py_layer || continue
			initrd=(-initrd "$WORK/initramfs-py.cpio")
			prog=$(cat "$WORK/py-argv")
		elif grep -qx "/usr/bin/cuda-$p" guest-programs.txt; then
			prog=/usr/bin/cuda-$p
		else
			echo "  $p: not in the guest image (guest-programs.txt): skipped"
			continue
		fi
		args=G_ARGS_$key lines=G_LINES_$key
		prog=$prog,${!args}
		echo "  $p: $(echo "$prog" | tr , ' ')"
		# shellcheck disable=SC2086 # VGPU_FLAGS and VM_FLAGS are words
		step "g-$p" "$G_LIMIT" ./gmigd demo -cache "$DIR/cache" $VGPU_FLAGS -local-mem "$G_LOCAL" -guest-ram 1024 \
			"${initrd[@]}" -cuda-program "$prog" -program-lines "${!lines}" -log-level warn -keep ${VM_FLAGS:-}
		out=$LOGS/g-$p.log
		# The consoles and daemons' logs kept, then the demo's files go;
		# the program's lines on B are those after the migration.
		files=$(sed -n 's/.*; files in \(\/[^ ]*\)$/\1/p' "$out" | head -1)
		after=?
		if [ -n "$files" ] && [ -d "$files" ]; then
			mkdir -p "$LOGS/g-$p"
			for f in "$files"/*/gmigd.log "$files"/*/vms/*/console.log; do
				[ -f "$f" ] && cp "$f" "$LOGS/g-$p/$(echo "${f#"$files"/}" | tr / -)"
			done
			[ -f "$files/b/vms/demo/console.log" ] && after=$(grep -c '^gmig: .*digest' "$files/b/vms/demo/console.log")
			rm -rf "$files"
		fi
		grep -E 'Error|error|FAIL' "$out" | grep -v '^  |' | head -5 | sed "s/^/  $p: /"
		echo "  $p: downtime $(sed -n 's/^ *downtime (pause -> resume[^)]*) *//p' "$out" | head -1)" \
			"(guest-observed $(sed -n 's/^ *guest-observed downtime ([^)]*) *//p' "$out" | head -1))," \
			"$after digest lines after the migration," \
			"$(grep -q 'never migrated (.*): identical' "$out" && echo identical || echo DIFFERENT) vs the never-migrated run"
	done
}

# bench NAME FLAGS...: gmig-bench's real-VM matrix (issue 16) into
# logs/NAME, its tables printed at the end.
bench() {
	local name=$1
	shift
	step "$name" 560 ./gmig-bench -inproc=false -qemu -cache "$DIR/cache" -gmigd "$DIR/gmigd" "$@" -out "$LOGS/$name"
	sed -n '/^Downtime (pause/,$p' "$LOGS/$name.log"
}

# ---- bench16's place: the flags of issue 16's real-VM matrix. The
# bench16 engineer picks them: edit this default (or set BENCH_FLAGS);
# parts d and e stay as they are. Default: the software back end's -qemu
# matrix at 1, 4 and 16 GiB.
BENCH_FLAGS=${BENCH_FLAGS:--qemu-mems $BENCH_MEMS -qemu-budget 20s}
# ---- end of bench16's place.

part_d() {
	echo "== d: gmig-bench -qemu $BENCH_FLAGS (the guest-write log)"
	# shellcheck disable=SC2086 # the flags are words
	bench bench-qemu-tracked $BENCH_FLAGS
}

part_e() {
	echo "== e: gmig-bench -qemu $BENCH_FLAGS -no-tracking (the full hash)"
	# shellcheck disable=SC2086
	bench bench-qemu-full $BENCH_FLAGS -no-tracking
}

part_f() {
	echo "== f: the GPU workers on the GPU"
	local n
	for n in cudadrv nvidia; do
		[ -x "$n.test" ] || { [ -f "$n.test.xz" ] && unxz_to "$n.test.xz" "$n.test" && chmod +x "$n.test"; }
	done
	# Each test binary runs in its package's directory of the carried
	# repository (the directory above this one), where its testdata is.
	local repo
	repo=$(cd "$DIR/.." && pwd)
	step gpu-scribble 120 env -C "$repo/guest/cudadrv" "$DIR/cudadrv.test" -test.run 'TestScribbleContainedByWorkersGPU' -test.v -test.count 1
	grep -E '^(---|ok|FAIL|PASS)|cuCtxSynchronize|skipping' "$LOGS/gpu-scribble.log" | sed 's/^/  /'
	step gpu-bulk 120 env -C "$repo/engine/nvidia" "$DIR/nvidia.test" -test.run 'TestLocalBulkGPU' -test.v -test.count 1
	grep -E '^(---|ok|FAIL|PASS)|skipping' "$LOGS/gpu-bulk.log" | sed 's/^/  /'
	# The local tracker's stop-phase costs at the sizes of LOCAL_TIMES
	# (GiB): the GPU hash and compare, the read of 1 % of the pages, a
	# destination's load of them.
	step gpu-local-times 120 env -C "$repo/engine/nvidia" GMIG_LOCAL_TIMES="$LOCAL_TIMES" "$DIR/nvidia.test" -test.run 'TestLocalTrackerTimes' -test.v -test.count 1
	grep -E '^(---|ok|FAIL|PASS)|local:|skipping' "$LOGS/gpu-local-times.log" | sed 's/^/  /'
}

echo "device-run: parts $PARTS$([ "$DRY" = 1 ] && echo ' (dry: no GPU; the cuda back end on its model)'), logs in $OUT, budget $BUDGET s"
setup
case $PARTS in *a*) part_a ;; esac
case $PARTS in *b*) part_b ;; esac
case $PARTS in *c*) part_c ;; esac
case $PARTS in *d*) part_d ;; esac
case $PARTS in *e*) part_e ;; esac
case $PARTS in *f*) part_f ;; esac
case $PARTS in *g*) part_g ;; esac
pack
rm -rf "$WORK"
echo "device-run: done in $SECONDS s"
