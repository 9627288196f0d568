package qemu

import (
	"errors"
	"strings"
	"testing"
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
