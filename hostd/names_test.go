package hostd

import (
	"errors"
	"testing"

	"github.com/gmig-dev/gmig/vgpu"
)

// TestClientRefusesPathNames: a name that is not one (CheckName) is
// refused by the client before any request: `vm stop ../vgpus/x8` used to
// reach DELETE /v1/vgpus/x8 and remove that vGPU.
func TestClientRefusesPathNames(t *testing.T) {
	h := newHost(t)
	c, _ := serveAPI(t, h)
	if _, err := h.Create(vgpu.Config{Name: "x8", MemSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	bad := "../vgpus/x8"
	calls := map[string]func() error{
		"vm stop":   func() error { return c.StopVM(bad) },
		"vgpu rm":   func() error { return c.Destroy("../" + bad) },
		"vgpu show": func() error { _, err := c.Get("x8/.."); return err },
		"vm adopt":  func() error { _, err := c.AdoptVM(bad, AdoptRequest{QMP: "/q", VGPU: "x8"}); return err },
		"vm start":  func() error { _, err := c.StartVM(StartVMRequest{Name: bad}); return err },
		"vgpu new":  func() error { _, err := c.Create(CreateRequest{Name: "Gmigd"}); return err },
		"migrate": func() error {
			_, err := c.Migrate(t.Context(), bad, MigrateRequest{To: "127.0.0.1:1"}, nil)
			return err
		},
		"adopt vgpu": func() error { _, err := c.AdoptVM("vm", AdoptRequest{QMP: "/q", VGPU: "../x8"}); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrName) {
			t.Errorf("%s: %v, want ErrName", name, err)
		}
	}
	if _, err := h.Get("x8"); err != nil {
		t.Fatalf("vGPU x8 after the refused requests: %v", err)
	}
}
