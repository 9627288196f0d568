package precopy

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vgpu"
)

// TestReceiveRefusesAnotherVGPU: the begin Meta carries the source's
// vgpu.Spec, and a destination vGPU that is not that vGPU (another size,
// another back end) refuses the stream at its start with the difference
// named; the source's error carries it, and nothing is restored.
func TestReceiveRefusesAnotherVGPU(t *testing.T) {
	migtest.UseCUDAModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		name string
		dst  vgpu.Config
		says string
	}{
		{"another size", vgpu.Config{Name: "dst", MemSize: 2 << 20}, "memory size 1048576 (here 2097152)"},
		{"another back end", vgpu.Config{Name: "dst", MemSize: 1 << 20, Backend: vgpu.BackendCUDA}, "back end software (here cuda)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := migtest.NewDev(t, migtest.NewPool(t, 2<<20), "v", 1<<20, 1)
			src.FillMemory(1)
			pb := migtest.NewPool(t, 4<<20)
			dst := migtest.NewVGPUConfig(t, pb, c.dst)
			a, b := migtest.TCPPair(t)
			recv := receive(ctx, b, dst, Options{Log: migtest.Log})
			s, err := NewSource(src.V, a, Options{Log: migtest.Log})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = s.Precopy(ctx)
			if err == nil {
				_, err = s.Stop(ctx)
			}
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("source: %v, want ErrRefused saying %q", err, c.says)
			}
			s.Rollback()
			r := <-recv
			if !errors.Is(r.err, vgpu.ErrSpec) || !strings.HasPrefix(r.err.Error(), "precopy: the source's vGPU: ") {
				t.Fatalf("Receive = %v, want the source's vGPU refused (vgpu.ErrSpec)", r.err)
			}
			checkDiscarded(t, dst, pb)
		})
	}
}

// TestReceiveRefusesBeginWithoutSpec: a begin Meta without the source's
// vGPU (a gmigd from before the spec crossed) is refused, saying so.
func TestReceiveRefusesBeginWithoutSpec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pb := migtest.NewPool(t, 2<<20)
	dst := migtest.NewVGPU(t, pb, "dst", 1<<20)
	a, b := migtest.TCPPair(t)
	recv := receive(ctx, b, dst, Options{Log: migtest.Log})
	w, err := stream.NewWriter(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeMeta(w, meta{Phase: phaseBegin, Name: "v", Strategy: OneShot, StateEncoding: stateEncoding}); err != nil {
		t.Fatal(err)
	}
	const says = "does not describe the source's vGPU"
	m, err := readVerdict(a)
	if err != nil || m.OK || !strings.Contains(m.Error, says) {
		t.Fatalf("verdict %+v, %v; want a refusal saying %q", m, err, says)
	}
	a.(*net.TCPConn).CloseWrite()
	if r := <-recv; r.err == nil || !strings.Contains(r.err.Error(), says) {
		t.Fatalf("Receive = %v", r.err)
	}
	checkDiscarded(t, dst, pb)
}
