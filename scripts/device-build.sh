#!/usr/bin/env bash
# device-build.sh [DIR]: packs into DIR (default .devcarry-vm, git-ignored)
# everything the device machine's VM run needs (docs/nvidia.md,
# "Evidence: the VM run"), which has no Go, no QEMU and no network:
#   qemu-root.tar.xz       the minimal QEMU of the provisioned root: its
#                          loader, qemu-system-x86_64, the libraries the
#                          loader lists for it, the firmware a pc machine
#                          boots with (usr/share/qemu's few files, seabios)
#   guest/vmlinuz, guest/initramfs.cpio.xz   the guest image
#   guest-programs.txt     the CUDA programs the guest image carries
#   gmigd.xz, gmig-bench.xz   CGO_ENABLED=0, -s -w, xz-compressed
#   libcuda.so.1           cmd/libcuda for host processes (GMIG_CUDA_SOCKET)
#   cuda-*                 cmd/libcuda/testdata's C programs, built here
#                          against NVIDIA's cuda.h, linked to libcuda.so.1
#                          (NVIDIA's on the device, or this one), and
#                          vecadd.py where it exists, with pyguest.py
#                          (device-run.sh g packs the device's Python
#                          for vecadd.py in the guest)
#   device-run.sh          the run (device-run.sh -h)
# Reads the provisioned root, guest image and cuda.h from $GMIG_CACHE
# (default .cache). Prints the total; fails over 60 MiB (the device
# machine takes 64 MiB with the repository's own files).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$top/.devcarry-vm}
cache=${GMIG_CACHE:-$top/.cache}
root=$cache/qemu-root
# The most DIR may hold: 64 MiB carried in all, less the repository's
# tracked files (about 5 MiB) and a margin.
limit=$((60 << 20))
# The device machine's glibc (Ubuntu 24.04): the newest GLIBC_ symbol
# version what runs there natively may need.
glibc_max=2.39

for f in "$root/lib64/ld-linux-x86-64.so.2" "$root/usr/bin/qemu-system-x86_64" \
	"$cache/guest/vmlinuz" "$cache/guest/initramfs.cpio" "$cache/cuda/include/cuda.h"; do
	[ -e "$f" ] || { echo "device-build: $f missing (make provision guest-image; GMIG_CACHE=$cache)" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/guest"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cd "$top"
export GOOS=linux GOARCH=amd64

# needs_glibc FILE: fails when FILE needs a GLIBC_ version newer than the device's.
needs_glibc() {
	local v
	v=$(objdump -T "$1" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
	if [ -n "$v" ] && [ "$(printf '%s\n%s\n' "$v" "$glibc_max" | sort -V | tail -1)" != "$glibc_max" ]; then
		echo "device-build: $1 needs GLIBC_$v, the device has $glibc_max" >&2
		exit 1
	fi
	echo "  $(basename "$1"): newest GLIBC_ symbol ${v:-none}"
}

for c in gmigd gmig-bench; do
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$stage/$c" ./cmd/$c
	xz -T0 -9 -c "$stage/$c" >"$out/$c.xz"
done
# The GPU tests of the GPU workers (part f of device-run.sh): the hostile
# kernel contained on the real GPU, the bulk buffer's DMA.
for t in guest/cudadrv engine/nvidia; do
	n=$(basename "$t")
	CGO_ENABLED=0 go test -c -tags cuda -trimpath -ldflags='-s -w' -o "$stage/$n.test" "./$t"
	xz -T0 -9 -c "$stage/$n.test" >"$out/$n.test.xz"
done
CGO_ENABLED=1 go build -trimpath -buildmode=c-shared \
	-ldflags='-s -w -extldflags=-Wl,-soname,libcuda.so.1' -o "$out/libcuda.so.1" ./cmd/libcuda
rm -f "$out/libcuda.so.h"
needs_glibc "$out/libcuda.so.1"

# The CUDA programs: the probe always, the evidence programs that exist.
for p in probe vecadd matmul streams launchrate copybw; do
	src=cmd/libcuda/testdata/$p.c
	[ -f "$src" ] || { echo "  $src: not in this tree, skipped"; continue; }
	gcc -O2 -I"$cache/cuda/include" -o "$out/cuda-$p" "$src" "$out/libcuda.so.1" -lm
	needs_glibc "$out/cuda-$p"
done
[ -f cmd/libcuda/testdata/vecadd.py ] && cp cmd/libcuda/testdata/vecadd.py scripts/pyguest.py "$out/"

# The minimal QEMU: the loader, the binary, the libraries the root's loader
# resolves for it (as `chroot ROOT ldd` lists them), the firmware.
q=$stage/qemu-root
mkdir -p "$q/usr/lib/x86_64-linux-gnu" "$q/usr/lib64" "$q/usr/bin" "$q/usr/share/qemu"
ln -s usr/lib "$q/lib"
ln -s usr/lib64 "$q/lib64"
ln -s usr/bin "$q/bin"
cp -L "$root/lib64/ld-linux-x86-64.so.2" "$q/usr/lib/x86_64-linux-gnu/"
ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$q/usr/lib64/ld-linux-x86-64.so.2"
cp -L "$root/usr/bin/qemu-system-x86_64" "$q/usr/bin/"
libs=$("$root/lib64/ld-linux-x86-64.so.2" --library-path "$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu" \
	--list "$root/usr/bin/qemu-system-x86_64" | awk '$2 == "=>" {print $3}')
n=0
for l in $libs; do
	case $l in "$root"/*) ;; *) echo "device-build: $l is outside the root" >&2; exit 1 ;; esac
	cp -L "$l" "$q/usr/lib/x86_64-linux-gnu/"
	n=$((n + 1))
done
for f in kvmvapic.bin linuxboot_dma.bin multiboot_dma.bin pvh.bin efi-virtio.rom; do
	cp -L "$root/usr/share/qemu/$f" "$q/usr/share/qemu/"
done
cp -rL "$root/usr/share/seabios" "$q/usr/share/"
"$q/lib64/ld-linux-x86-64.so.2" --library-path "$q/lib/x86_64-linux-gnu" "$q/usr/bin/qemu-system-x86_64" --version | head -1 |
	sed "s/^/  minimal root ($n libraries, $(du -sm "$q" | cut -f1) MiB): /"
tar -C "$stage" -cf - qemu-root | xz -T0 -9 >"$out/qemu-root.tar.xz"

cp "$cache/guest/vmlinuz" "$out/guest/"
xz -T0 -9 -c "$cache/guest/initramfs.cpio" >"$out/guest/initramfs.cpio.xz"
cpio -it --quiet <"$cache/guest/initramfs.cpio" | sed -n 's#^\(\./\)\{0,1\}usr/bin/\(cuda-.*\)#/usr/bin/\2#p' >"$out/guest-programs.txt"
echo "  guest programs: $(tr '\n' ' ' <"$out/guest-programs.txt")"
cp scripts/device-run.sh "$out/"

ls -l "$out" "$out/guest" | sed 's/^/  /'
total=$(du -sb "$out" | cut -f1)
echo "device-build: $out holds $((total >> 20)) MiB ($total bytes; at most $((limit >> 20)) MiB)"
[ "$total" -le "$limit" ] || { echo "device-build: over $((limit >> 20)) MiB" >&2; exit 1; }
