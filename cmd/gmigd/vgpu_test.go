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
