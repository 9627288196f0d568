package guest

import (
	"context"
	"fmt"
	"math"

	"github.com/gmig-dev/gmig/abi"
)

// exec runs one op on the device (and, with Check, on the model).
func (w *Workload) exec(ctx context.Context, d *Driver, op Op) error {
	m, l := w.model, w.l
	if op.Kind != OpCPUWrite && op.Kind != OpCPUFloats {
		w.submitted = true
	}
	ga := func(off uint64) uint64 { return w.base + off }
	switch op.Kind {
	case OpInit:
		if m != nil {
			RefFill(m, 0, op.Len, 0)
		}
		return d.Fill(ga(0), op.Len, 0)
	case OpFill:
		if m != nil {
			RefFill(m, op.Dst, op.Len, op.Word)
		}
		return d.Fill(ga(op.Dst), op.Len, op.Word)
	case OpCopy:
		if m != nil {
			RefCopy(m, op.Dst, op.Src, op.Len)
		}
		return d.Copy(ga(op.Dst), ga(op.Src), op.Len)
	case OpDMATo:
		gpa, buf, err := w.stage(d, op.Len)
		if err != nil {
			return err
		}
		seededBytes(buf, op.Seed)
		if m != nil {
			RefDMAToGfx(m, op.Dst, buf)
		}
		return d.DMAToGfx(ga(op.Dst), gpa, op.Len)
	case OpDMAFrom:
		gpa, _, err := w.stage(d, op.Len)
		if err != nil {
			return err
		}
		if m != nil {
			base, _ := d.Staging()
			w.pendingReads = append(w.pendingReads, pendingRead{op: op, off: gpa - base, want: RefDMAFromGfx(m, op.Src, op.Len)})
		}
		return d.DMAFromGfx(ga(op.Src), gpa, op.Len)
	case OpCPUWrite, OpCPUFloats:
		// CPU stores reach memory at once; let the device finish what
		// this step already submitted so the order matches the model.
		if w.submitted {
			if err := d.Sync(ctx); err != nil {
				return err
			}
			w.submitted = false
		}
		buf := make([]byte, op.Len)
		if op.Kind == OpCPUWrite {
			seededBytes(buf, op.Seed)
		} else {
			seededFloats(buf, op.Seed)
		}
		if m != nil {
			copy(m[op.Dst:], buf)
		}
		return d.WriteGA(ga(op.Dst), buf)
	case OpCPUScatter:
		if w.submitted {
			if err := d.Sync(ctx); err != nil {
				return err
			}
			w.submitted = false
		}
		return scatter(op, func(off uint64, b []byte) error {
			if m != nil {
				copy(m[off:], b)
			}
			return d.WriteGA(ga(off), b)
		})
	case OpPrefill:
		Prefill(d.bus.Aperture(), w.cfg.Fill, int64(op.Seed), d.allocatedAperture())
		return nil
	case OpLoad:
		return d.LoadKernel(op.Handle, op.Word)
	case OpUnload:
		return d.UnloadKernel(op.Handle)
	case OpSaxpy:
		if m != nil {
			RefSaxpy(m, op.Len, math.Float32frombits(op.Word), op.Src, op.Dst)
		}
		return d.Saxpy(op.Handle, op.Len, math.Float32frombits(op.Word), ga(op.Src), ga(op.Dst))
	case OpStencil:
		src, dst := op.Src, op.Dst
		for range op.Word {
			if m != nil {
				RefStencil(m, l.gridW, l.gridH, src, dst)
			}
			if err := d.Stencil(op.Handle, l.gridW, l.gridH, ga(src), ga(dst)); err != nil {
				return err
			}
			src, dst = dst, src
		}
		return nil
	case OpRender:
		if m != nil {
			RefRender(m, l.fbW, l.fbH, op.Dst, op.Frame)
		}
		return d.Render(op.Handle, l.fbW, l.fbH, ga(op.Dst), op.Frame)
	}
	return fmt.Errorf("guest: unknown workload op %s", op.Kind)
}

// stage hands out n bytes of the DMA staging buffer for this step.
func (w *Workload) stage(d *Driver, n uint64) (uint64, []byte, error) {
	gpa, buf := d.Staging()
	if buf == nil {
		return 0, nil, errNoStaging
	}
	at := (w.stageUsed + 7) &^ 7
	if at+n > uint64(len(buf)) {
		return 0, nil, fmt.Errorf("guest: workload step needs more than %d bytes of staging", len(buf))
	}
	w.stageUsed = at + n
	return gpa + at, buf[at : at+n], nil
}

// verify checks the step's DMA reads, the fence slot and the whole region
// against the model.
func (w *Workload) verify(ctx context.Context, d *Driver, fence uint64) error {
	_, staging := d.Staging()
	for _, r := range w.pendingReads {
		got := staging[r.off : r.off+uint64(len(r.want))]
		if i := firstDiff(got, r.want); i >= 0 {
			return fmt.Errorf("guest: workload step %d: %s: guest RAM byte %d is %#02x, model %#02x",
				w.steps-1, r.op, i, got[i], r.want[i])
		}
	}
	var slot [8]byte
	if err := d.ReadGA(w.fence, slot[:]); err != nil {
		return err
	}
	if got := le64(slot[:]); got != fence {
		return fmt.Errorf("guest: workload step %d: fence slot holds %d, want %d", w.steps-1, got, fence)
	}
	if w.prev == nil {
		return w.compare(d, 0, uint64(len(w.model)))
	}
	// Runs of changed pages, read back by DMA in pieces that fit the
	// staging buffer (the step's DMA reads were checked above: it is free).
	gpa, stage := d.Staging()
	size := uint64(len(w.model))
	for off := uint64(0); off < size; {
		end := min(off+abi.PageSize, size)
		if firstDiff(w.model[off:end], w.prev[off:end]) < 0 {
			off = end
			continue
		}
		run := off
		for end < size && end-run < uint64(len(stage)) {
			next := min(end+abi.PageSize, size)
			if firstDiff(w.model[end:next], w.prev[end:next]) < 0 {
				break
			}
			end = next
		}
		if err := w.compareDMA(ctx, d, gpa, stage, run, end); err != nil {
			return err
		}
		off = end
	}
	return nil
}

// compareDMA copies region bytes [off, end) into guest RAM with the device
// and checks them against the model.
func (w *Workload) compareDMA(ctx context.Context, d *Driver, gpa uint64, stage []byte, off, end uint64) error {
	n := end - off
	if err := d.DMAFromGfx(w.base+off, gpa, n); err != nil {
		return err
	}
	if err := d.Sync(ctx); err != nil {
		return err
	}
	if i := firstDiff(stage[:n], w.model[off:end]); i >= 0 {
		at := off + uint64(i)
		return fmt.Errorf("guest: workload step %d: graphics address %#x (region offset %#x) reads back %#02x by DMA, model %#02x",
			w.steps-1, w.base+at, at, stage[i], w.model[at])
	}
	return nil
}

// compare reads region bytes [off, end) through the aperture and checks
// them against the model.
func (w *Workload) compare(d *Driver, off, end uint64) error {
	got := make([]byte, end-off)
	if err := d.ReadGA(w.base+off, got); err != nil {
		return err
	}
	if i := firstDiff(got, w.model[off:end]); i >= 0 {
		at := off + uint64(i)
		return fmt.Errorf("guest: workload step %d: graphics address %#x (region offset %#x) is %#02x, model %#02x",
			w.steps-1, w.base+at, at, got[i], w.model[at])
	}
	return nil
}
