package qemu

import (
	"errors"
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

// TestAdoptedSpecLibvirt129Monitor: libvirt 12.9 (trixie-backports) gives
// QEMU its monitor as a monitor-qmp object over a chardev on a descriptor
// it passed (its command line, from /proc/PID/cmdline of a domain it
// started); both are the host's own and leave the adopted command line,
// where the descriptor would refuse the adoption. Another chardev on a
// descriptor still refuses it.
func TestAdoptedSpecLibvirt129Monitor(t *testing.T) {
	dev := `{"driver":"vfio-user-pci","id":"gpu0","socket":{"path":"/run/gmig/vm1.sock","type":"unix"}}`
	mem := `{"qom-type":"memory-backend-memfd","id":"pc.ram","share":true,"x-use-canonical-path-for-ramblock-id":false,"size":536870912}`
	for _, mon := range []string{
		`{"qom-type":"monitor-qmp","id":"monitor","chardev":"charmonitor"}`,
		"monitor-qmp,id=monitor,chardev=charmonitor",
	} {
		argv := []string{"/usr/bin/qemu-system-x86_64", "-name", "guest=vm1,debug-threads=on", "-S",
			"-machine", "pc-i440fx-11.1,usb=off,memory-backend=pc.ram", "-object", mem,
			"-chardev", "socket,id=charmonitor,fd=17,server=on,wait=off", "-object", mon,
			"-rtc", "base=utc", "-device", dev, "-chardev", "file,id=console,path=/tmp/vm1.console,append=on"}
		spec, err := AdoptedSpec(argv, "gpu0")
		if err != nil {
			t.Fatalf("monitor %s: %v", mon, err)
		}
		got := strings.Join(spec.Argv, " ")
		want := "-name guest=vm1,debug-threads=on -machine pc-i440fx-11.1,usb=off,memory-backend=pc.ram -object " + mem +
			" -rtc base=utc -chardev file,id=console,path=/tmp/vm1.console,append=on"
		if got != want {
			t.Fatalf("monitor %s: argv\n got %s\nwant %s", mon, got, want)
		}
		argv = append(argv, "-chardev", "socket,id=charserial1,fd=21,server=on,wait=off")
		if _, err := AdoptedSpec(argv, "gpu0"); !errors.Is(err, ErrAdopt) || !strings.Contains(err.Error(), "fd=21") {
			t.Errorf("monitor %s: a serial chardev on a descriptor: %v, want ErrAdopt naming it", mon, err)
		}
	}
}
