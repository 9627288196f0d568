package hostd

import (
	"net"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/vgpu"
)

// TestNameReusedDuringDestroy: a vGPU created under the name of one still
// being destroyed (an incoming migration retried while the failed one's
// landing is discarded) keeps its vfio-user socket. The old vGPU's
// shutdown used to unlink the path after the new one had bound it, and
// the next QEMU exited at start: "Failed to connect to '.../vm.sock': No
// such file or directory".
func TestNameReusedDuringDestroy(t *testing.T) {
	h := newHost(t)
	for i := range 30 {
		old, err := h.Create(vgpu.Config{Name: "vm", MemSize: 4 << 20})
		if err != nil {
			t.Fatal(err)
		}
		// A client holds a session, as the killed QEMU's did until the
		// server stopping closed it.
		c, err := net.Dial("unix", old.Socket)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- h.Destroy("vm") }()
		var info Info
		for {
			info, err = h.Create(vgpu.Config{Name: "vm", MemSize: 4 << 20})
			if err == nil {
				break
			}
			time.Sleep(50 * time.Microsecond) // the old one is still listed
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		c.Close()
		n, err := net.Dial("unix", info.Socket)
		if err != nil {
			t.Fatalf("round %d: the new vGPU's socket after the old one's destroy: %v", i, err)
		}
		n.Close()
		if err := h.Destroy("vm"); err != nil {
			t.Fatal(err)
		}
	}
}
