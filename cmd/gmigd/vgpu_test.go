package main

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestVGPUCreateLocalMem: vgpu create -local-mem asks the daemon for that
// much device-local memory beside the graphics memory, and a size that is
// not one is refused before anything is sent.
func TestVGPUCreateLocalMem(t *testing.T) {
	d := newFakeDaemon(t, map[string]http.HandlerFunc{
		"POST /v1/vgpus": answer(http.StatusCreated, `{"name":"g","local_mem_size":1073741824}`),
	})
	code, out, errOut := runCLI(t, "vgpu", "create", "g", "-mem", "32M", "-local-mem", "1G", "-run-dir", d.dir)
	want := `POST /v1/vgpus {"name":"g","mem_size":33554432,"backend":"software","local_mem_size":1073741824}`
	if code != exitOK || !slices.Contains(d.requests(), want) || !strings.Contains(out, `"local_mem_size": 1073741824`) {
		t.Fatalf("exit %d, requests %q, want %q\n%s%s", code, d.requests(), want, out, errOut)
	}
	n := len(d.requests())
	if code, _, errOut := runCLI(t, "vgpu", "create", "g", "-local-mem", "lots", "-run-dir", d.dir); code != exitUsage || len(d.requests()) != n {
		t.Fatalf("-local-mem lots: exit %d, %d requests after %d\n%s", code, len(d.requests()), n, errOut)
	}
}

// TestVMStartVGPUFlags: vm start -backend, -guest-modules and -local-mem
// ask the daemon for a vGPU so made, as vgpu create's do; a size that is
// not one is refused before anything is sent.
func TestVMStartVGPUFlags(t *testing.T) {
	d := newFakeDaemon(t, map[string]http.HandlerFunc{
		"POST /v1/vms": answer(http.StatusCreated, `{"name":"vm1"}`),
	})
	code, out, errOut := runCLI(t, "vm", "start", "vm1", "-backend", "cuda", "-guest-modules", "-local-mem", "1G", "-run-dir", d.dir)
	want := `POST /v1/vms {"name":"vm1","vgpu_mem_size":67108864,"vgpu_backend":"cuda","vgpu_guest_modules":true,"vgpu_local_mem_size":1073741824,"qemu":{"machine":"pc","memory_mb":512,"cpus":1}}`
	if code != exitOK || !slices.Equal(d.requests(), []string{want}) {
		t.Fatalf("exit %d, requests %q, want %q\n%s%s", code, d.requests(), want, out, errOut)
	}
	for _, bad := range [][]string{{"-local-mem", "lots"}, {"-guest-modules=maybe"}} {
		args := append([]string{"vm", "start", "vm1", "-run-dir", d.dir}, bad...)
		if code, _, errOut := runCLI(t, args...); code != exitUsage || len(d.requests()) != 1 {
			t.Fatalf("%q: exit %d, requests %q\n%s", bad, code, d.requests(), errOut)
		}
	}
}
