package qemu

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/apilog"
)

func TestArgsSharedMemfdAndDevice(t *testing.T) {
	args, err := Config{Spec: Spec{Kernel: "/k", Append: "console=ttyS0", Accel: "tcg"}, RunDir: "/r", VfioUser: "/r/gpu0.sock", Incoming: true}.Args()
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{
		"memory-backend-memfd,id=mem,size=512M,share=on",
		"memory-backend=mem",
		`{"driver":"vfio-user-pci","id":"gpu0","socket":{"path":"/r/gpu0.sock","type":"unix"}}`,
		"-S -incoming defer",
		"-machine pc,memory-backend=mem",
		"unix:/r/qmp.sock,server=on,wait=off",
		"-chardev socket,id=gmig-hmp,path=/r/hmp.sock,server=on,wait=off -mon chardev=gmig-hmp,mode=readline",
		"-kernel /k",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("args lack %q:\n%s", want, line)
		}
	}
}

func TestArgsRefuseUnsharedMemory(t *testing.T) {
	for _, extra := range [][]string{
		{"-object", "memory-backend-memfd,id=m2,size=1G,share=off"},
		{"-object", "memory-backend-ram,id=m2,size=1G"},
		{"-object", "memory-backend-file,id=m2,size=1G,mem-path=/dev/shm/x"},
	} {
		if _, err := (Config{Spec: Spec{Extra: extra, Accel: "tcg"}, RunDir: "/r"}).Args(); !errors.Is(err, ErrSharedMemory) {
			t.Errorf("extra %q: err = %v, want ErrSharedMemory", extra, err)
		}
	}
	if _, err := (Config{Spec: Spec{Extra: []string{"-object", "memory-backend-memfd,id=m2,size=1G,share=on"}, Accel: "tcg"}, RunDir: "/r"}).Args(); err != nil {
		t.Errorf("shared memfd refused: %v", err)
	}
}

func TestRootCheck(t *testing.T) {
	if err := Root(t.TempDir()).Check(); !errors.Is(err, ErrNoRoot) {
		t.Fatalf("empty root: %v", err)
	}
}

func TestChipsetOf(t *testing.T) {
	for m, want := range map[string]Chipset{"": PIIX3, "pc": PIIX3, "pc-i440fx-11.1": PIIX3, "q35": ICH9, "pc-q35-9.2": ICH9} {
		if got, err := ChipsetOf(m); err != nil || got != want {
			t.Errorf("ChipsetOf(%q) = %v, %v; want %v", m, got, err, want)
		}
	}
	for _, m := range []string{"microvm", "isapc", "x-remote", "q35x"} {
		if _, err := ChipsetOf(m); !errors.Is(err, ErrMachine) {
			t.Errorf("ChipsetOf(%q) = %v, want ErrMachine", m, err)
		}
	}
	if _, err := (Spec{Machine: "microvm"}).Resolve(); !errors.Is(err, ErrMachine) {
		t.Errorf("Resolve of a microvm: %v, want ErrMachine", err)
	}
}

func TestSharedMemfd(t *testing.T) {
	for v, want := range map[string]bool{
		"memory-backend-memfd,id=mem,size=2G,share=on":                                     true,
		"memory-backend-memfd,id=mem,size=2G":                                              false,
		"memory-backend-memfd,id=mem,size=2G,share=off":                                    false,
		`{"qom-type":"memory-backend-memfd","id":"pc.ram","share":true,"size":2147483648}`: true,
		`{"qom-type":"memory-backend-memfd","id":"pc.ram","share":false}`:                  false,
		`{"qom-type":"memory-backend-file","id":"pc.ram","share":true}`:                    false,
		"memory-backend-ram,id=mem,size=1G":                                                false,
	} {
		if got := isSharedMemfd(v); got != want {
			t.Errorf("isSharedMemfd(%q) = %v", v, got)
		}
	}
}

// TestAdoptedSpec: an adopted QEMU's command line loses what each host
// sets (monitors and their chardevs, the vGPU device, -incoming, -S,
// -daemonize, -pidfile) and keeps the rest; unsafe ones are refused.
func TestAdoptedSpec(t *testing.T) {
	dev := `{"driver":"vfio-user-pci","id":"gpu0","socket":{"path":"/run/gmig/gpu0.sock","type":"unix"}}`
	mem := `{"qom-type":"memory-backend-memfd","id":"pc.ram","share":true,"size":2147483648}`
	argv := []string{"/usr/bin/qemu-system-x86_64", "-name", "guest=vm1", "-S",
		"-object", mem, "-machine", "pc-q35-9.2,usb=off,memory-backend=pc.ram",
		"-chardev", "socket,id=charmonitor,path=/var/lib/libvirt/qemu/vm1/monitor.sock,server=on,wait=off",
		"-mon", "chardev=charmonitor,id=monitor,mode=control",
		"-qmp", "unix:/run/gmig/vm1.qmp,server=on,wait=off",
		"-chardev", "pty,id=charserial0", "-device", "isa-serial,chardev=charserial0,id=serial0",
		"-device", dev, "-daemonize", "-pidfile", "/run/vm1.pid", "-incoming", "defer"}
	spec, err := AdoptedSpec(argv, "gpu0")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(spec.Argv, " ")
	want := "-name guest=vm1 -object " + mem + " -machine pc-q35-9.2,usb=off,memory-backend=pc.ram -chardev pty,id=charserial0 -device isa-serial,chardev=charserial0,id=serial0"
	if got != want {
		t.Fatalf("argv\n got %s\nwant %s", got, want)
	}
	if c, _ := ChipsetOf(machineOfArgv(spec.Argv)); c != ICH9 {
		t.Fatalf("machine of the adopted VM: %q", machineOfArgv(spec.Argv))
	}
	bad := map[string][]string{
		"no vGPU":       {"qemu", "-object", mem, "-machine", "q35,memory-backend=pc.ram"},
		"private RAM":   {"qemu", "-object", "memory-backend-ram,id=m,size=1G", "-machine", "q35", "-device", dev},
		"default RAM":   {"qemu", "-m", "1G", "-machine", "q35", "-device", dev},
		"microvm":       {"qemu", "-object", mem, "-machine", "microvm", "-device", dev},
		"tap fd":        {"qemu", "-object", mem, "-machine", "q35", "-device", dev, "-netdev", "tap,id=n0,fd=23"},
		"add-fd":        {"qemu", "-object", mem, "-machine", "q35", "-device", dev, "-add-fd", "fd=3,set=1"},
		"empty":         {"qemu"},
		"other vGPU id": {"qemu", "-object", mem, "-machine", "q35", "-device", strings.Replace(dev, "gpu0", "gpu1", 1)},
	}
	for name, a := range bad {
		if _, err := AdoptedSpec(a, "gpu0"); !errors.Is(err, ErrAdopt) {
			t.Errorf("%s: %v, want ErrAdopt", name, err)
		}
	}
}

func TestMSIEnables(t *testing.T) {
	for _, c := range []struct {
		off  uint16
		size uint8
		arg  uint32
		want bool
	}{
		{0x52, 2, 0x0081, true}, {0x52, 2, 0x0080, false}, {0x52, 1, 0x01, true},
		{0x50, 4, 0x0081_0005, true}, {0x50, 4, 0x0080_0005, false}, {0x53, 1, 0xff, false},
		{0x04, 2, 0x0407, false}, {0x54, 4, 0xfee00000, false},
	} {
		w := apilog.Entry{Kind: apilog.ConfigWrite, Offset: c.off, Size: c.size, Arg: c.arg}
		if got := msiEnables(w); got != c.want {
			t.Errorf("msiEnables(%#x/%d = %#x) = %v", c.off, c.size, c.arg, got)
		}
	}
}

// TestOutgoingParameters: every source QEMU gets gmigd's bandwidth and
// downtime target unless the operator set them, never QEMU's own 300 ms.
func TestOutgoingParameters(t *testing.T) {
	for _, c := range []struct {
		bw       uint64
		limit    time.Duration
		wantBW   uint64
		wantDown int64
	}{
		{0, 0, DefaultMaxBandwidth, 20},
		{1 << 20, 150 * time.Millisecond, 1 << 20, 150},
		{0, time.Microsecond, DefaultMaxBandwidth, 1},
		{0, -time.Second, DefaultMaxBandwidth, 20},
	} {
		o := &Outgoing{MaxBandwidth: c.bw, DowntimeLimit: c.limit}
		p := o.parameters()
		if p["max-bandwidth"] != c.wantBW || p["downtime-limit"] != c.wantDown {
			t.Errorf("bandwidth %d limit %v: parameters %v, want max-bandwidth %d downtime-limit %d", c.bw, c.limit, p, c.wantBW, c.wantDown)
		}
		// The orchestrator's stop-phase estimate counts what QEMU is told.
		if got := o.ExpectedDowntime(); got.Milliseconds() != c.wantDown {
			t.Errorf("limit %v: ExpectedDowntime %v, want %d ms", c.limit, got, c.wantDown)
		}
	}
}

// TestAdoptedSpecMonitors: a command line gmigd gave a QEMU, adopted
// (a restarted gmigd, a hop's next source), loses both monitors, and the
// destination's command line built from it has both again, its own.
func TestAdoptedSpecMonitors(t *testing.T) {
	src := Config{Spec: Spec{Accel: "tcg"}, RunDir: "/a", VfioUser: "/a/gpu0.sock"}
	args, err := src.Args()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := AdoptedSpec(append([]string{"qemu-system-x86_64"}, args...), DeviceID)
	if err != nil {
		t.Fatal(err)
	}
	if line := strings.Join(spec.Argv, " "); strings.Contains(line, "-qmp") || strings.Contains(line, "-mon") ||
		strings.Contains(line, hmpChardev) || strings.Contains(line, "/a/") {
		t.Fatalf("the adopted command line keeps a monitor of the source host: %s", line)
	}
	dst, err := Config{Spec: spec, RunDir: "/b", VfioUser: "/b/gpu0.sock", Incoming: true}.Args()
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(dst, " ")
	for _, want := range []string{"-qmp unix:/b/qmp.sock,server=on,wait=off",
		"-chardev socket,id=gmig-hmp,path=/b/" + HMPSocket + ",server=on,wait=off", "-mon chardev=gmig-hmp,mode=readline"} {
		if strings.Count(line, want) != 1 {
			t.Errorf("the destination's command line has %q %d times:\n%s", want, strings.Count(line, want), line)
		}
	}
}
