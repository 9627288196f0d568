#!/usr/bin/env bash
# guest-image.sh: build the guest's initramfs: /init is the static gmig-guest
# binary, plus the stock uio modules it loads for interrupts. Needs the root
# from provision.sh (for the kernel's modules). Output: .cache/guest/initramfs.cpio
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cache=${CACHE:-$top/.cache}
root=$cache/qemu-root
out=$cache/guest/initramfs.cpio
stage=$cache/guest/stage
t0=$SECONDS

rm -rf "$stage"
mkdir -p "$stage/lib/modules/gmig" "$stage/proc" "$stage/sys" "$stage/dev"
(cd "$top" && CGO_ENABLED=0 GOTOOLCHAIN=auto go build -trimpath -ldflags=-s -o "$stage/init" ./cmd/gmig-guest)
kver=$(basename "$(ls -d "$root"/lib/modules/* | sort -V | tail -1)")
for m in uio uio_pci_generic; do
	cp "$root/lib/modules/$kver/kernel/drivers/uio/$m.ko.xz" "$stage/lib/modules/gmig/"
done
(cd "$stage" && find . -print0 | sort -z | cpio --null -o -H newc --quiet >"$out.tmp")
mv "$out.tmp" "$out"
echo "guest-image: $out ($(du -h "$out" | cut -f1), kernel $kver) in $((SECONDS - t0))s"
