package vfio

import (
	"fmt"
	"math/bits"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// IRQSet is one VFIO_USER_DEVICE_SET_IRQS request (struct vfio_irq_set):
// exactly one IRQSetData* and one IRQSetAction* bit in Flags, applied to
// vectors [Start, Start+Count) of interrupt Index.
//
// With IRQSetDataEventfd, FDs is either empty, which de-assigns the vectors
// (the specification: "If no file descriptors are provided, this de-assigns
// the specified previously configured interrupts"), or holds Count entries,
// where a nil entry de-assigns its vector (the kernel's fd -1). With
// IRQSetDataBool, Bools holds Count entries.
type IRQSet struct {
	Index uint32
	Flags uint32
	Start uint32
	Count uint32
	FDs   []*os.File
	Bools []bool
}

// maxVectors bounds Start+Count per PCI interrupt index (INTx, MSI, MSI-X,
// ERR, REQ), the limits of the PCI specification as vfio-pci applies them.
var maxVectors = [PCINumIRQs]uint32{1, 32, 2048, 1, 1}

// IRQTable holds the eventfds a client configured and the device's INTx
// line. The server applies SET_IRQS requests; device goroutines call SetINTx
// and SignalMSI at any time.
//
// INTx follows VFIO's level-triggered, auto-masked model: while the line is
// asserted and not masked the trigger eventfd is signalled once and the line
// masks itself; an unmask (a SET_IRQS UNMASK, or the client writing the
// unmask eventfd it registered with ACTION_UNMASK|DATA_EVENTFD, which QEMU
// uses as its resample fd) clears the mask and signals again if the line is
// still asserted.
type IRQTable struct {
	mu       sync.Mutex
	triggers [PCINumIRQs][]*os.File // per index, per vector; nil = none
	intx     intxState
	watchers sync.WaitGroup
}

type intxState struct {
	asserted bool
	masked   bool
	unmask   *os.File // watched by a goroutine of generation gen
	gen      uint64
}

// NewIRQTable returns a table with nothing configured.
func NewIRQTable() *IRQTable { return &IRQTable{} }

// Set applies s. The table takes ownership of s.FDs whether Set succeeds or
// not: it keeps those it installs and closes the rest.
func (t *IRQTable) Set(s IRQSet) error {
	fds := s.FDs
	if err := validateIRQSet(&s); err != nil {
		closeFiles(fds)
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	data, action := s.Flags&IRQSetDataTypeMask, s.Flags&IRQSetActionTypeMask
	if s.Count == 0 { // DATA_NONE|ACTION_TRIGGER: disable the index
		t.disableLocked(s.Index)
		return nil
	}
	switch action {
	case IRQSetActionTrigger:
		if data == IRQSetDataEventfd {
			t.assignTriggersLocked(s)
			return nil
		}
		for i := range s.Count {
			if data == IRQSetDataNone || s.Bools[i] {
				t.signalLocked(s.Index, s.Start+i)
			}
		}
	case IRQSetActionMask:
		if data == IRQSetDataNone || s.Bools[0] {
			t.intx.masked = true
		}
	case IRQSetActionUnmask:
		if data == IRQSetDataEventfd {
			var f *os.File
			if len(s.FDs) > 0 {
				f = s.FDs[0]
			}
			return t.setUnmaskFDLocked(f)
		}
		if data == IRQSetDataNone || s.Bools[0] {
			t.unmaskINTxLocked()
		}
	}
	return nil
}

// validateIRQSet checks s against linux/vfio.h's rules for vfio_irq_set.
func validateIRQSet(s *IRQSet) error {
	data, action := s.Flags&IRQSetDataTypeMask, s.Flags&IRQSetActionTypeMask
	bad := func(why string) error {
		return fmt.Errorf("%w: set irqs index %d flags %#x start %d count %d: %s",
			ErrInvalid, s.Index, s.Flags, s.Start, s.Count, why)
	}
	switch {
	case s.Index >= PCINumIRQs:
		return bad("no such index")
	case s.Flags&^(IRQSetDataTypeMask|IRQSetActionTypeMask) != 0:
		return bad("unknown flags")
	case bits.OnesCount32(data) != 1 || bits.OnesCount32(action) != 1:
		return bad("need one data and one action flag")
	case s.Count == 0 && (data != IRQSetDataNone || action != IRQSetActionTrigger):
		return bad("count 0 is only for DATA_NONE|ACTION_TRIGGER")
	case s.Count == 0 && s.Start != 0:
		return bad("disable with nonzero start")
	case uint64(s.Start)+uint64(s.Count) > uint64(maxVectors[s.Index]):
		return bad(fmt.Sprintf("beyond %d vectors", maxVectors[s.Index]))
	case action != IRQSetActionTrigger && s.Index != PCIINTxIRQIndex:
		return bad("mask and unmask apply to INTx only")
	case action == IRQSetActionMask && data == IRQSetDataEventfd:
		return fmt.Errorf("%w: mask eventfd", ErrUnsupported)
	case data == IRQSetDataBool && len(s.Bools) != int(s.Count):
		return bad(fmt.Sprintf("%d bools", len(s.Bools)))
	case data == IRQSetDataEventfd && len(s.FDs) != 0 && len(s.FDs) != int(s.Count):
		return bad(fmt.Sprintf("%d eventfds", len(s.FDs)))
	case data != IRQSetDataEventfd && len(s.FDs) != 0:
		return bad("eventfds without DATA_EVENTFD")
	}
	return nil
}

// assignTriggersLocked installs (or, for empty/nil entries, removes) the
// trigger eventfds of s's vectors.
func (t *IRQTable) assignTriggersLocked(s IRQSet) {
	vec := t.triggers[s.Index]
	if need := int(s.Start + s.Count); len(vec) < need {
		vec = append(vec, make([]*os.File, need-len(vec))...)
	}
	for i := range s.Count {
		v := s.Start + i
		if vec[v] != nil {
			vec[v].Close()
			vec[v] = nil
		}
		if len(s.FDs) > 0 {
			vec[v] = s.FDs[i]
		}
	}
	t.triggers[s.Index] = vec
}

// disableLocked drops everything configured for index.
func (t *IRQTable) disableLocked(index uint32) {
	closeFiles(t.triggers[index])
	t.triggers[index] = nil
	if index == PCIINTxIRQIndex {
		t.stopUnmaskLocked()
		t.intx.masked = false
	}
}

// setUnmaskFDLocked installs f (nil: none) as the INTx unmask eventfd and
// starts a goroutine that unmasks INTx whenever f becomes readable.
func (t *IRQTable) setUnmaskFDLocked(f *os.File) error {
	t.stopUnmaskLocked()
	if f == nil {
		return nil
	}
	f, err := pollableFile(f)
	if err != nil {
		return err
	}
	t.intx.unmask = f
	gen := t.intx.gen
	t.watchers.Add(1)
	go t.watchUnmask(f, gen)
	return nil
}

// stopUnmaskLocked closes the unmask eventfd, which ends its watcher; a
// watcher that already read an event sees the generation change and does
// nothing.
func (t *IRQTable) stopUnmaskLocked() {
	t.intx.gen++
	if t.intx.unmask != nil {
		t.intx.unmask.Close()
		t.intx.unmask = nil
	}
}

func (t *IRQTable) watchUnmask(f *os.File, gen uint64) {
	defer t.watchers.Done()
	var buf [8]byte
	for {
		if _, err := f.Read(buf[:]); err != nil {
			return // closed by stopUnmaskLocked, or not an eventfd
		}
		t.mu.Lock()
		if t.intx.gen == gen {
			t.unmaskINTxLocked()
		}
		t.mu.Unlock()
	}
}

// pollableFile returns a non-blocking duplicate of f (closing f), so that a
// blocked Read on it ends when it is closed.
func pollableFile(f *os.File) (*os.File, error) {
	defer f.Close()
	fd, err := rawFD(f)
	if err != nil {
		return nil, err
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("vfio: duplicating unmask eventfd: %w", err)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, fmt.Errorf("vfio: unmask eventfd non-blocking: %w", err)
	}
	return os.NewFile(uintptr(nfd), "vfio-intx-unmask"), nil
}

// SetINTx sets the level of the device's INTx line. Asserting it while it is
// not masked signals the trigger eventfd and masks the line.
func (t *IRQTable) SetINTx(asserted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.intx.asserted = asserted
	if asserted {
		t.raiseINTxLocked()
	}
}

func (t *IRQTable) raiseINTxLocked() {
	if t.intx.masked || len(t.triggers[PCIINTxIRQIndex]) == 0 || t.triggers[PCIINTxIRQIndex][0] == nil {
		return
	}
	t.signalLocked(PCIINTxIRQIndex, 0)
	t.intx.masked = true
}

func (t *IRQTable) unmaskINTxLocked() {
	t.intx.masked = false
	if t.intx.asserted {
		t.raiseINTxLocked()
	}
}

// INTxState reports the INTx line's level and mask.
func (t *IRQTable) INTxState() (asserted, masked bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.intx.asserted, t.intx.masked
}

// MSIEnabled reports whether the client configured any MSI or MSI-X
// eventfd (QEMU disables INTx when the guest enables MSI).
func (t *IRQTable) MSIEnabled() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.msiIndexLocked() != PCIINTxIRQIndex
}

// msiIndexLocked returns the MSI or MSI-X index, whichever has eventfds
// (QEMU enables only one at a time), or PCIINTxIRQIndex for neither.
func (t *IRQTable) msiIndexLocked() uint32 {
	for _, idx := range []uint32{PCIMSIIRQIndex, PCIMSIXIRQIndex} {
		for _, f := range t.triggers[idx] {
			if f != nil {
				return idx
			}
		}
	}
	return PCIINTxIRQIndex
}

// SignalMSI signals MSI (or MSI-X, whichever the client enabled) vector, if
// the client configured an eventfd for it.
func (t *IRQTable) SignalMSI(vector uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if idx := t.msiIndexLocked(); idx != PCIINTxIRQIndex {
		t.signalLocked(idx, vector)
	}
}

// eventfdOne is the 8-byte host-order counter increment written to signal.
var eventfdOne = ne.AppendUint64(nil, 1)

// signalLocked writes 1 to the trigger eventfd of index/vector, if any. A
// failed write (the client closed its end of a non-eventfd) is dropped, as a
// lost edge on a dead client.
func (t *IRQTable) signalLocked(index, vector uint32) {
	vec := t.triggers[index]
	if int(vector) < len(vec) && vec[vector] != nil {
		_, _ = vec[vector].Write(eventfdOne)
	}
}

// Close closes every eventfd and waits for the unmask watcher to stop. The
// INTx level is kept (it is the device's) and the mask cleared; the table
// stays usable for the next client.
func (t *IRQTable) Close() {
	t.mu.Lock()
	for i := range t.triggers {
		closeFiles(t.triggers[i])
		t.triggers[i] = nil
	}
	t.stopUnmaskLocked()
	t.intx.masked = false
	t.mu.Unlock()
	t.watchers.Wait()
}
