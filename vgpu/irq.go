package vgpu

import (
	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/apilog"
)

// deliver turns the register file's pending interrupt causes into a signal:
// one MSI message per rising edge when the client has set up an MSI eventfd
// (QEMU does so when the guest enables MSI), otherwise the
// INTx level (gated by the command register's INTx-disable bit).
// Called with the register file locked (see the package's lock order).
func (v *VGPU) deliver(pending, rising uint32) {
	if v.irqs.MSIEnabled() {
		v.pci.SetInterruptStatus(false)
		v.irqs.SetINTx(false)
		if rising != 0 {
			v.irqs.SignalMSI(0)
		}
		return
	}
	v.pci.SetInterruptStatus(pending != 0)
	v.irqs.SetINTx(pending != 0 && !v.pci.INTxDisabled())
}

// events adapts the vGPU to engine.Events.
type events struct{ v *VGPU }

func (e events) FenceCompleted(value uint64, interrupt bool) {
	e.v.fences.Add(1)
	e.v.apiLog.Record(apilog.Entry{Kind: apilog.Fence, Value: value})
	if interrupt {
		e.v.regs.Raise(abi.IntFence)
	}
}

func (e events) Faulted(f engine.Fault) {
	e.v.faults.Add(1)
	e.v.regs.Fault(f)
}

func (e events) Wrote(xs []gtt.Extent) {
	e.v.written.Add(gtt.TotalLen(xs))
	if f := e.v.wroteHook.Load(); f != nil {
		base := e.v.part.Offset
		for _, x := range xs {
			(*f)(x.Off-base, x.Len)
		}
	}
}

func (e events) KernelLoaded(handle, kind uint32) {
	e.v.apiLog.Record(apilog.Entry{Kind: apilog.KernelLoad, Handle: handle, Arg: kind})
}

func (e events) KernelUnloaded(handle uint32) {
	e.v.apiLog.Record(apilog.Entry{Kind: apilog.KernelUnload, Handle: handle})
}
