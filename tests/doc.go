// Package tests holds gmig's end-to-end tests: real QEMU 11.1 under KVM, a
// real Linux guest running cmd/gmig-guest, gmigd's vGPUs over vfio-user.
// They need the root, kernel and initramfs that `make provision guest-image`
// builds under .cache/ (GMIG_CACHE overrides where), root privileges and
// /dev/kvm; without them they skip and say why. `make test` builds them
// first, so CI runs them.
package tests
