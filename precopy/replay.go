package precopy

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/internal/vgpu"
)

// stateTarget replays the APILog section into a received vgpu.State before
// it is restored: the log is the only carrier of kernel objects, FENCE_DONE
// and the interrupt registers (the source strips them from the state).
type stateTarget struct{ st *vgpu.State }

func (t *stateTarget) LoadKernel(handle, kind uint32) error {
	t.st.Engine.Kernels = append(t.st.Engine.Kernels, engine.KernelObject{Handle: handle, Kind: kind})
	return nil
}

func (t *stateTarget) SetFenceDone(value uint64) error {
	t.st.Engine.FenceDone = value
	return nil
}

func (t *stateTarget) SetInterrupts(status, mask uint32) error {
	t.st.Regs.IntStatus, t.st.Regs.IntMask = status, mask
	return nil
}

func (t *stateTarget) WriteConfig(offset uint16, size uint8, value uint32) error {
	return fmt.Errorf("precopy: config write %#x/%d in the APILog section (it belongs in FrontEnd)", offset, size)
}

func sortKernels(ks []engine.KernelObject) {
	slices.SortFunc(ks, func(a, b engine.KernelObject) int { return cmp.Compare(a.Handle, b.Handle) })
}

// frontEndTarget replays the FrontEnd section into the caller's FrontEnd
// (nil: the writes are only recorded in the new vGPU's API log).
type frontEndTarget struct{ fe FrontEnd }

func (t frontEndTarget) LoadKernel(handle, _ uint32) error {
	return fmt.Errorf("precopy: kernel %d in the FrontEnd section", handle)
}

func (t frontEndTarget) SetFenceDone(uint64) error {
	return fmt.Errorf("precopy: a fence in the FrontEnd section")
}

func (t frontEndTarget) SetInterrupts(uint32, uint32) error {
	return fmt.Errorf("precopy: interrupt state in the FrontEnd section")
}

func (t frontEndTarget) WriteConfig(offset uint16, size uint8, value uint32) error {
	if t.fe == nil {
		return nil
	}
	return t.fe.WriteConfig(offset, size, value)
}
