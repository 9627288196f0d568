#!/usr/bin/env bash
# provision.sh: build the cached test root for end-to-end tests, idempotently.
#
#   ROOT=.cache/qemu-root  a debootstrap'd Debian trixie (minbase) with QEMU 11.1
#                          from trixie-backports (bookworm's QEMU 7.2 has no
#                          vfio-user client; installing trixie packages on the
#                          host would upgrade its glibc, so QEMU runs in a chroot)
#   .cache/guest/vmlinuz   the Debian kernel the guest boots (linux-image-amd64
#                          installed in the same root)
#   libvirt in ROOT        libvirtd and virsh (trixie-backports' libvirt, 12.9 as
#                          of 2026-11-28; trixie's 11.3 before), whose QEMU
#                          driver runs the QEMU 11.1 above, for the libvirt end-to-end
#                          test; a step of its own, so an existing root gets it
#
# Re-running is cheap: each step checks its own stamp. Prints what it does and
# how long each step takes. Needs root and Debian's package mirror.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cache=${CACHE:-$top/.cache}
root=$cache/qemu-root
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$cache/guest"

step() { # step NAME STAMP CMD...: run CMD unless STAMP exists, with timing
	local name=$1 stamp=$2; shift 2
	if [[ -e $stamp ]]; then
		echo "provision: $name: cached"
		return
	fi
	echo "provision: $name ..."
	local t0=$SECONDS
	"$@"
	touch "$stamp"
	echo "provision: $name: done in $((SECONDS - t0))s"
}

host_tools() {
	local missing=()
	for t in debootstrap cpio; do command -v "$t" >/dev/null || missing+=("$t"); done
	if ((${#missing[@]})); then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
}

bootstrap() {
	rm -rf "$root"
	debootstrap --variant=minbase trixie "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
		{ tail -20 "$cache/debootstrap.log"; return 1; }
}

in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }

install_qemu() {
	echo "deb $mirror trixie-backports main" >"$root/etc/apt/sources.list.d/backports.list"
	mount_root
	trap umount_root RETURN
	in_root apt-get update -qq
	in_root apt-get install -y -qq --no-install-recommends -t trixie-backports qemu-system-x86 >/dev/null
	in_root apt-get install -y -qq --no-install-recommends linux-image-amd64 >/dev/null
	in_root apt-get clean
	in_root qemu-system-x86_64 --version | head -1
}

# libvirtd (Debian ships no separate virtqemud), its QEMU driver and virsh;
# -t trixie-backports takes the backported libvirt (12.9 since late
# November 2026, which gives QEMU its monitor as a monitor-qmp object over
# a passed descriptor; trixie's 11.3 used -mon over a socket path). The libvirt end-to-end test runs them in a private mount
# namespace with its own configuration (tests/libvirt_test.go).
install_libvirt() {
	mount_root
	local rc=0
	{
		in_root apt-get update -qq &&
			in_root apt-get install -y -qq --no-install-recommends -t trixie-backports \
				libvirt-daemon-driver-qemu libvirt-daemon libvirt-clients >/dev/null &&
			in_root apt-get clean &&
			in_root libvirtd --version
	} || rc=$?
	umount_root
	return $rc
}

# NVIDIA's cuda.h, for the guest's C probe (cmd/libcuda/testdata/probe.c,
# built by guest-image.sh): Debian trixie's non-free nvidia-cuda-dev (about
# 900 MB) is downloaded with a private source list and state (the root's
# own apt configuration is untouched), cuda.h alone is kept under
# $cache/cuda/include, and the package is deleted.
fetch_cuda_h() {
	local tmp=$root/tmp/gmig-cudah
	local o="-o Dir::Etc::sourcelist=/tmp/gmig-cudah/sources.list -o Dir::Etc::sourceparts=- -o Dir::State::Lists=/tmp/gmig-cudah/lists -o APT::Get::List-Cleanup=0"
	rm -rf "$tmp"
	mkdir -p "$tmp/lists/partial" "$cache/cuda/include"
	echo "deb $mirror trixie non-free" >"$tmp/sources.list"
	local rc=0
	mount_root
	{
		in_root apt-get $o update -qq &&
			in_root sh -c "cd /tmp/gmig-cudah && apt-get $o download -qq nvidia-cuda-dev 2>/dev/null" &&
			dpkg-deb --fsys-tarfile "$tmp"/nvidia-cuda-dev_*.deb | tar -x -C "$tmp" ./usr/include/cuda.h &&
			cp "$tmp/usr/include/cuda.h" "$cache/cuda/include/cuda.h"
	} || rc=$?
	umount_root
	rm -rf "$tmp"
	return $rc
}

mount_root() {
	for d in proc sys dev; do
		mountpoint -q "$root/$d" || mount --rbind "/$d" "$root/$d"
	done
}

umount_root() {
	for d in dev sys proc; do
		mountpoint -q "$root/$d" && umount -R "$root/$d" || true
	done
}

guest_kernel() {
	local k
	k=$(ls "$root"/boot/vmlinuz-* | sort -V | tail -1)
	cp "$k" "$cache/guest/vmlinuz"
	echo "provision: guest kernel $(basename "$k")"
}

t0=$SECONDS
step "host tools (debootstrap, cpio)" "$cache/.host-tools" host_tools
step "debootstrap trixie into $root" "$cache/.bootstrap" bootstrap
step "QEMU 11.1 (trixie-backports) and linux-image-amd64 in the root" "$cache/.qemu" install_qemu
step "guest kernel" "$cache/.kernel" guest_kernel
step "libvirt (libvirtd, virsh) in the root" "$cache/.libvirt" install_libvirt
step "NVIDIA's cuda.h (nvidia-cuda-dev, non-free) for the guest's C probe" "$cache/.cudah" fetch_cuda_h
echo "provision: ready in $((SECONDS - t0))s: QEMU root $root, kernel $cache/guest/vmlinuz"
