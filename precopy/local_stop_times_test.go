package precopy

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vgpu"
)

// TestGPULocalStopTimes measures a pre-copy migration's stop phase with n
// device-local pages changed behind the engine's back after the pre-copy
// (every other page of 2n: runs of one), for each n GMIG_STOP_TIMES lists
// (GMIG_STOP_TIMES=4096,40960; unset, the test skips), on the CUDA model:
// with GPU isolation "process" (source and destination each in a GPU
// worker: the changed pages cross the bulk buffers) and "shared" (both
// back ends in this process), side by side, on each stream count
// GMIG_STOP_STREAMS lists (default 1; the local pages are spread over
// them). It checks that exactly the n pages are sent at the stop and that
// the destination's local memory is the source's.
func TestGPULocalStopTimes(t *testing.T) {
	ns, ks := envInts("GMIG_STOP_TIMES"), envInts("GMIG_STOP_STREAMS")
	if len(ns) == 0 {
		t.Skip("set GMIG_STOP_TIMES to changed-page counts (4096,40960) to measure")
	}
	if len(ks) == 0 {
		ks = []int{1}
	}
	for _, n := range ns {
		for _, k := range ks {
			for _, iso := range []string{vgpu.IsolationProcess, vgpu.IsolationShared} {
				t.Run(fmt.Sprintf("pages=%d/streams=%d/%s", n, k, iso), func(t *testing.T) { stopTimes(t, n, k, iso) })
			}
		}
	}
}

// envInts is the positive integers of the comma-separated list in the
// environment variable name.
func envInts(name string) []int {
	var out []int
	for _, f := range strings.Split(os.Getenv(name), ",") {
		if n, err := strconv.Atoi(f); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

func stopTimes(t *testing.T, n, k int, iso string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const pg = stream.PageSize
	local := uint64(2*n) * pg
	src, dst := cudaLocalPairSized(t, local, iso)
	s, recv, _ := startOnStreams(ctx, t, src.V, dst.V, k, Options{Strategy: OneShot, Workers: 2, SerialStop: true, Log: migtest.Log})
	must(t, s.Precopy(ctx))
	g := src.V.GPU()
	for i := range n {
		must(t, g.ModelWrite(g.DeviceAddrBase()+uint64(2*i)*pg+uint64(i%512)*8, []byte{1, 2, 3, 4, 5, 6, 7, byte(i)}))
	}
	rep, err := s.Stop(ctx)
	must(t, err)
	r := <-recv
	must(t, r.err)
	if rep.Stop.LocalPages != n {
		t.Errorf("%d local pages at the stop, want %d", rep.Stop.LocalPages, n)
	}
	st := rep.Stop
	t.Logf("isolation %s, %d changed local pages (%d MiB), %d streams (%d local pages on the extra ones): stop %v (scan %v, transfer %v, restore %v, other %v)",
		iso, n, n*pg>>20, k, s.shardLocal.Load(), st.Total, st.Scan, st.Transfer, r.rep.Stop.Restore, st.Other())
	read := func(v *vgpu.VGPU) []byte {
		out := make([]byte, local)
		must(t, v.GPU().Read(out, []gtt.Extent{{Off: v.Partition().ApertureEnd(), Len: local}}))
		return out
	}
	if !bytes.Equal(read(src.V), read(dst.V)) {
		t.Fatal("the destination's local memory differs from the source's")
	}
}
