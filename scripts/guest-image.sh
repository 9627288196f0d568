#!/usr/bin/env bash
# guest-image.sh: build the guest's initramfs: /init is the static gmig-guest
# binary, plus the stock kernel modules it loads for interrupts (uio and
# uio_pci_generic for INTx; vfio, vfio_iommu_type1, vfio-pci and
# virtio-iommu for MSI; with what they depend on) and a modules.dep for
# them, taken from the kernel's own; and the guest's libcuda.so.1
# (cmd/libcuda, built with cgo) with the CUDA probe and evidence programs
# (cmd/libcuda/testdata/{probe,vecadd,matmul,streams,launchrate,copybw}.c
# built against NVIDIA's cuda.h from provision.sh, /usr/bin/cuda-probe,
# /usr/bin/cuda-vecadd, ...) and the root's glibc
# loader and libraries they need, which gmig.cuda=... runs (docs/cuda.md).
# Needs the root from provision.sh (for the kernel's modules and glibc). Output: .cache/guest/initramfs.cpio. Rebuilding
# starts from an empty stage, so running it again gives the same image.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cache=${CACHE:-$top/.cache}
root=$cache/qemu-root
out=$cache/guest/initramfs.cpio
stage=$cache/guest/stage
mods="uio_pci_generic virtio-iommu vfio vfio_iommu_type1 vfio-pci"
t0=$SECONDS

rm -rf "$stage"
mkdir -p "$stage/lib/modules/gmig" "$stage/proc" "$stage/sys" "$stage/dev"
(cd "$top" && CGO_ENABLED=0 GOTOOLCHAIN=auto go build -trimpath -ldflags=-s -o "$stage/init" ./cmd/gmig-guest)
# The CUDA library, its programs and what they link (their NEEDED entries,
# from the root's glibc, whose loader the programs name as their interpreter).
libdir=$stage/usr/lib/x86_64-linux-gnu
mkdir -p "$libdir" "$stage/lib/x86_64-linux-gnu" "$stage/lib64" "$stage/usr/bin"
(cd "$top" && CGO_ENABLED=1 GOTOOLCHAIN=auto go build -trimpath -buildmode=c-shared \
	-ldflags="-s -extldflags=-Wl,-soname,libcuda.so.1" -o "$libdir/libcuda.so.1" ./cmd/libcuda)
rm -f "$libdir/libcuda.so.h"
# The evidence programs (docs/cuda.md, "Programs") beside the probe, as
# /usr/bin/cuda-NAME.
bins=()
for p in probe vecadd matmul streams launchrate copybw; do
	bins+=("$stage/usr/bin/cuda-$p")
	gcc -O2 -I"$cache/cuda/include" -o "$stage/usr/bin/cuda-$p" "$top/cmd/libcuda/testdata/$p.c" "$libdir/libcuda.so.1"
done
cp -L "$root/lib64/ld-linux-x86-64.so.2" "$stage/lib64/"
for lib in $(readelf -d "$libdir/libcuda.so.1" "${bins[@]}" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]/\1/p' | sort -u); do
	[ "$lib" = libcuda.so.1 ] && continue
	cp -L "$root/lib/x86_64-linux-gnu/$lib" "$stage/lib/x86_64-linux-gnu/" || {
		echo "guest-image: $lib not in $root/lib/x86_64-linux-gnu" >&2
		exit 1
	}
done

kver=$(basename "$(ls -d "$root"/lib/modules/* | sort -V | tail -1)")
kmods=$root/lib/modules/$kver
dst=$stage/lib/modules/gmig

# Each wanted module's modules.dep line lists every module it needs; copy
# them all and keep their lines, with paths cut to file names.
declare -A files=()
for m in $mods; do
	line=$(grep -E "(^|/)$m\.ko(\.[a-z]+)?:" "$kmods/modules.dep") || {
		echo "guest-image: module $m not in $kmods/modules.dep" >&2
		exit 1
	}
	for f in ${line/:/}; do
		files[$f]=1
	done
done
for f in "${!files[@]}"; do
	cp "$kmods/$f" "$dst/"
	grep -E "^$f:" "$kmods/modules.dep" | sed -E 's#[^ :]*/##g' >>"$dst/modules.dep.tmp"
done
sort "$dst/modules.dep.tmp" >"$dst/modules.dep"
rm "$dst/modules.dep.tmp"

(cd "$stage" && find . -print0 | sort -z | cpio --null -o -H newc --quiet >"$out.tmp")
mv "$out.tmp" "$out"
echo "guest-image: $out ($(du -h "$out" | cut -f1), kernel $kver, modules: $(cd "$dst" && ls -- *.ko* | sed 's/\.ko.*//' | tr '\n' ' '))in $((SECONDS - t0))s"
