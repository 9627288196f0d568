package qemu

import (
	"strings"
	"testing"
)

// TestAdoptedSpecDropsLibvirtMasterKey: libvirt 11.3 starts every QEMU
// with a secret read from that start's state directory (seen in
// /proc/PID/cmdline of a domain it started); a destination has no such
// file, so the adopted command line leaves it out, and only it.
func TestAdoptedSpecDropsLibvirtMasterKey(t *testing.T) {
	dev := `{"driver":"vfio-user-pci","id":"gpu0","socket":{"path":"/run/gmig/vm1.sock","type":"unix"}}`
	mem := `{"qom-type":"memory-backend-memfd","id":"pc.ram","share":true,"x-use-canonical-path-for-ramblock-id":false,"size":268435456}`
	key := `{"qom-type":"secret","id":"masterKey0","format":"raw","file":"/var/lib/libvirt/qemu/domain-1-vm1/master-key.aes"}`
	other := `{"qom-type":"secret","id":"disk0-secret","format":"raw","file":"/etc/keys/disk0"}`
	argv := []string{"/usr/bin/qemu-system-x86_64", "-name", "guest=vm1,debug-threads=on", "-S",
		"-object", key, "-machine", "pc-i440fx-11.1,usb=off,memory-backend=pc.ram", "-object", mem,
		"-object", "secret,id=masterKey0,format=raw,file=/var/lib/libvirt/qemu/domain-2-vm1/master-key.aes",
		"-object", other, "-device", dev}
	spec, err := AdoptedSpec(argv, "gpu0")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(spec.Argv, " ")
	want := "-name guest=vm1,debug-threads=on -machine pc-i440fx-11.1,usb=off,memory-backend=pc.ram -object " + mem + " -object " + other
	if got != want {
		t.Fatalf("argv\n got %s\nwant %s", got, want)
	}
}
