#!/usr/bin/env bash
# programs.sh: the evidence programs (docs/cuda.md, "Programs") on a GPU
# machine, natively and through gmig's libcuda.so.1.
#
#   programs.sh build [DIR]   on a development machine (Go, gcc, the cache's
#                             cuda.h): gmig's libcuda.so.1 into DIR/lib, the
#                             programs into DIR (linked by soname, so they
#                             load whichever libcuda.so.1 the loader finds),
#                             vecadd.py and this script. DIR defaults to the
#                             repository's bin/cudaprogs (git-ignored).
#   programs.sh run DIR OUT [gmig]
#                             on the GPU machine: each program with its
#                             default arguments (and vecadd.py where
#                             cuda-python imports), output and exit status in
#                             OUT/NAME.txt; natively on NVIDIA's driver, or
#                             with "gmig" through DIR/lib's library (set
#                             GMIG_CUDA_SOCKET to the vGPU's socket).
#   programs.sh compare A B   the lines of A/NAME.txt and B/NAME.txt but the
#                             timing ones must be the same; prints both runs'
#                             timing lines (the first 8 of each).
set -euo pipefail
progs="vecadd matmul streams launchrate copybw"

case ${1:-} in
build)
	here=$(cd "$(dirname "$0")" && pwd)
	top=$(cd "$here/../../.." && pwd)
	out=${2:-$top/bin/cudaprogs}
	inc=${GMIG_CACHE:-$top/.cache}/cuda/include
	mkdir -p "$out/lib"
	(cd "$top" && CGO_ENABLED=1 go build -trimpath -buildmode=c-shared \
		-ldflags="-s -extldflags=-Wl,-soname,libcuda.so.1" -o "$out/lib/libcuda.so.1" ./cmd/libcuda)
	rm -f "$out/lib/libcuda.so.h"
	for p in $progs; do
		gcc -O2 -I"$inc" -o "$out/$p" "$here/$p.c" "$out/lib/libcuda.so.1"
	done
	cp "$here/vecadd.py" "$here/programs.sh" "$out/"
	du -sh "$out"
	;;
run)
	dir=$(cd "$2" && pwd)
	out=$3
	mkdir -p "$out"
	env=()
	if [ "${4:-}" = gmig ]; then
		env=(LD_LIBRARY_PATH="$dir/lib")
	fi
	for p in $progs; do
		rc=0
		env "${env[@]}" "$dir/$p" >"$out/$p.txt" 2>&1 || rc=$?
		echo "exit $rc" >>"$out/$p.txt"
		echo "$p: exit $rc, $(grep -c . "$out/$p.txt") lines"
	done
	if python3 -c 'import cuda.bindings.driver' 2>/dev/null; then
		rc=0
		env "${env[@]}" python3 "$dir/vecadd.py" >"$out/vecadd.py.txt" 2>&1 || rc=$?
		echo "exit $rc" >>"$out/vecadd.py.txt"
		echo "vecadd.py: exit $rc"
	else
		echo "vecadd.py: skipped, cuda-python (cuda.bindings) does not import"
	fi
	;;
compare)
	rc=0
	for f in "$2"/*.txt; do
		n=$(basename "$f")
		if ! diff <(grep -v '^time:' "$f") <(grep -v '^time:' "$3/$n") >/dev/null; then
			echo "$n: DIFFERENT"
			diff <(grep -v '^time:' "$f") <(grep -v '^time:' "$3/$n") | head -20
			rc=1
		else
			echo "$n: same ($(grep -vc '^time:' "$f") lines)"
		fi
		grep '^time:' "$f" | head -8 | sed "s|^|  $2: |" || true
		grep '^time:' "$3/$n" | head -8 | sed "s|^|  $3: |" || true
	done
	if [ -f "$2/vecadd.py.txt" ]; then
		if diff "$2/vecadd.txt" "$2/vecadd.py.txt" >/dev/null; then
			echo "vecadd.py: the same as vecadd in $2"
		else
			echo "vecadd.py: DIFFERENT from vecadd in $2"
			rc=1
		fi
	fi
	exit $rc
	;;
*)
	sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
