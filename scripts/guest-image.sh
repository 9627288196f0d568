#!/usr/bin/env bash
# guest-image.sh: build the guest's initramfs: /init is the static gmig-guest
# binary, plus the stock kernel modules it loads for interrupts (uio and
# uio_pci_generic for INTx; vfio, vfio_iommu_type1, vfio-pci and
# virtio-iommu for MSI; with what they depend on) and a modules.dep for
# them, taken from the kernel's own. Needs the root from provision.sh (for
# the kernel's modules). Output: .cache/guest/initramfs.cpio. Rebuilding
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
