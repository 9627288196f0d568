package vfio

import (
	"errors"
	"os"
	"testing"
)

// setupINTx replays QEMU 11.1's INTx sequence (docs/testing.md, "QEMU 11.1 and vfio-user"):
// TRIGGER with an eventfd, MASK, UNMASK with a second (resample) eventfd,
// UNMASK. It returns the test's ends of both eventfds.
func setupINTx(t *testing.T, tab *IRQTable) (trigger, unmask *os.File) {
	t.Helper()
	trigger, unmask = eventfd(t), eventfd(t)
	steps := []IRQSet{
		{Index: PCIINTxIRQIndex, Flags: IRQSetDataEventfd | IRQSetActionTrigger, Count: 1, FDs: []*os.File{dupFile(t, trigger)}},
		{Index: PCIINTxIRQIndex, Flags: IRQSetDataNone | IRQSetActionMask, Count: 1},
		{Index: PCIINTxIRQIndex, Flags: IRQSetDataEventfd | IRQSetActionUnmask, Count: 1, FDs: []*os.File{dupFile(t, unmask)}},
		{Index: PCIINTxIRQIndex, Flags: IRQSetDataNone | IRQSetActionUnmask, Count: 1},
	}
	for i, s := range steps {
		if err := tab.Set(s); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	return trigger, unmask
}

func TestINTxAutomaskAndSetIRQsUnmask(t *testing.T) {
	tab := NewIRQTable()
	defer tab.Close()
	trigger, _ := setupINTx(t, tab)

	tab.SetINTx(true)
	if n := pollCount(t, trigger); n != 1 {
		t.Fatalf("assert: trigger count %d, want 1", n)
	}
	if _, masked := tab.INTxState(); !masked {
		t.Fatal("not auto-masked after signalling")
	}
	tab.SetINTx(true) // still asserted and masked: no new edge
	if n := pollCount(t, trigger); n != 0 {
		t.Fatalf("masked re-assert signalled %d", n)
	}
	// Unmask while still asserted: signal again and re-mask.
	if err := tab.Set(IRQSet{Index: PCIINTxIRQIndex, Flags: IRQSetDataNone | IRQSetActionUnmask, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if n := pollCount(t, trigger); n != 1 {
		t.Fatalf("unmask while asserted: count %d, want 1", n)
	}
	// Deassert, then unmask: nothing; the next assert signals.
	tab.SetINTx(false)
	if err := tab.Set(IRQSet{Index: PCIINTxIRQIndex, Flags: IRQSetDataBool | IRQSetActionUnmask, Count: 1, Bools: []bool{true}}); err != nil {
		t.Fatal(err)
	}
	if n := pollCount(t, trigger); n != 0 {
		t.Fatalf("unmask while deasserted signalled %d", n)
	}
	tab.SetINTx(true)
	if n := pollCount(t, trigger); n != 1 {
		t.Fatalf("assert after unmask: count %d, want 1", n)
	}
	// An explicit MASK holds the line back.
	tab.SetINTx(false)
	if err := tab.Set(IRQSet{Index: PCIINTxIRQIndex, Flags: IRQSetDataNone | IRQSetActionUnmask, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if err := tab.Set(IRQSet{Index: PCIINTxIRQIndex, Flags: IRQSetDataNone | IRQSetActionMask, Count: 1}); err != nil {
		t.Fatal(err)
	}
	tab.SetINTx(true)
	if n := pollCount(t, trigger); n != 0 {
		t.Fatalf("masked assert signalled %d", n)
	}
}

// TestINTxUnmaskEventfd unmasks through the resample eventfd, as QEMU does
// after the guest's EOI.
func TestINTxUnmaskEventfd(t *testing.T) {
	tab := NewIRQTable()
	defer tab.Close()
	trigger, unmask := setupINTx(t, tab)

	tab.SetINTx(true)
	if n := pollCount(t, trigger); n != 1 {
		t.Fatalf("assert: count %d", n)
	}
	signal(t, unmask) // still asserted: the watcher unmasks, the line fires again
	if n := waitCount(t, trigger); n != 1 {
		t.Fatalf("after unmask eventfd: count %d", n)
	}
	// Replacing the unmask eventfd retires the old one.
	newUnmask := eventfd(t)
	if err := tab.Set(IRQSet{Index: PCIINTxIRQIndex, Flags: IRQSetDataEventfd | IRQSetActionUnmask, Count: 1, FDs: []*os.File{dupFile(t, newUnmask)}}); err != nil {
		t.Fatal(err)
	}
	signal(t, newUnmask)
	if n := waitCount(t, trigger); n != 1 {
		t.Fatalf("after new unmask eventfd: count %d", n)
	}
	// Disabling the index (count 0) drops the trigger.
	if err := tab.Set(IRQSet{Index: PCIINTxIRQIndex, Flags: IRQSetDataNone | IRQSetActionTrigger}); err != nil {
		t.Fatal(err)
	}
	tab.SetINTx(false)
	tab.SetINTx(true)
	if n := pollCount(t, trigger); n != 0 {
		t.Fatalf("disabled INTx signalled %d", n)
	}
}

func TestMSI(t *testing.T) {
	tab := NewIRQTable()
	defer tab.Close()
	if tab.MSIEnabled() {
		t.Fatal("MSI enabled before setup")
	}
	tab.SignalMSI(0) // nothing configured: no effect
	v0, v1 := eventfd(t), eventfd(t)
	if err := tab.Set(IRQSet{Index: PCIMSIIRQIndex, Flags: IRQSetDataEventfd | IRQSetActionTrigger, Count: 2,
		FDs: []*os.File{dupFile(t, v0), dupFile(t, v1)}}); err != nil {
		t.Fatal(err)
	}
	if !tab.MSIEnabled() {
		t.Fatal("MSI not enabled")
	}
	tab.SignalMSI(1)
	tab.SignalMSI(1)
	tab.SignalMSI(7) // no such vector
	if a, b := pollCount(t, v0), pollCount(t, v1); a != 0 || b != 2 {
		t.Fatalf("counts %d %d, want 0 2", a, b)
	}
	// De-assign vector 1 with a nil entry (the kernel's fd -1).
	if err := tab.Set(IRQSet{Index: PCIMSIIRQIndex, Flags: IRQSetDataEventfd | IRQSetActionTrigger, Start: 1, Count: 1,
		FDs: []*os.File{nil}}); err != nil {
		t.Fatal(err)
	}
	tab.SignalMSI(1)
	tab.SignalMSI(0)
	if a, b := pollCount(t, v0), pollCount(t, v1); a != 1 || b != 0 {
		t.Fatalf("after de-assign: counts %d %d, want 1 0", a, b)
	}
	// DATA_EVENTFD without descriptors de-assigns the range.
	if err := tab.Set(IRQSet{Index: PCIMSIIRQIndex, Flags: IRQSetDataEventfd | IRQSetActionTrigger, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if tab.MSIEnabled() {
		t.Fatal("MSI still enabled")
	}
	// A client may trigger a vector itself (DATA_BOOL).
	if err := tab.Set(IRQSet{Index: PCIMSIIRQIndex, Flags: IRQSetDataEventfd | IRQSetActionTrigger, Count: 1, FDs: []*os.File{dupFile(t, v0)}}); err != nil {
		t.Fatal(err)
	}
	if err := tab.Set(IRQSet{Index: PCIMSIIRQIndex, Flags: IRQSetDataBool | IRQSetActionTrigger, Count: 1, Bools: []bool{true}}); err != nil {
		t.Fatal(err)
	}
	if n := pollCount(t, v0); n != 1 {
		t.Fatalf("client trigger: count %d", n)
	}
}

func TestIRQSetRefusals(t *testing.T) {
	tab := NewIRQTable()
	defer tab.Close()
	ev := eventfd(t)
	for _, c := range []struct {
		name string
		s    IRQSet
		want error
	}{
		{"bad index", IRQSet{Index: PCINumIRQs, Flags: IRQSetDataNone | IRQSetActionTrigger, Count: 1}, ErrInvalid},
		{"two data flags", IRQSet{Flags: IRQSetDataNone | IRQSetDataBool | IRQSetActionTrigger, Count: 1}, ErrInvalid},
		{"no action", IRQSet{Flags: IRQSetDataNone, Count: 1}, ErrInvalid},
		{"unknown flag", IRQSet{Flags: IRQSetDataNone | IRQSetActionTrigger | 1<<6, Count: 1}, ErrInvalid},
		{"too many vectors", IRQSet{Index: PCIMSIIRQIndex, Flags: IRQSetDataNone | IRQSetActionTrigger, Start: 30, Count: 3}, ErrInvalid},
		{"mask msi", IRQSet{Index: PCIMSIIRQIndex, Flags: IRQSetDataNone | IRQSetActionMask, Count: 1}, ErrInvalid},
		{"count 0 eventfd", IRQSet{Flags: IRQSetDataEventfd | IRQSetActionTrigger}, ErrInvalid},
		{"fd count", IRQSet{Index: PCIMSIIRQIndex, Flags: IRQSetDataEventfd | IRQSetActionTrigger, Count: 2, FDs: []*os.File{dupFile(t, ev)}}, ErrInvalid},
		{"fds without eventfd", IRQSet{Flags: IRQSetDataNone | IRQSetActionTrigger, Count: 1, FDs: []*os.File{dupFile(t, ev)}}, ErrInvalid},
		{"bools count", IRQSet{Flags: IRQSetDataBool | IRQSetActionTrigger, Count: 1}, ErrInvalid},
		{"mask eventfd", IRQSet{Flags: IRQSetDataEventfd | IRQSetActionMask, Count: 1, FDs: []*os.File{dupFile(t, ev)}}, ErrUnsupported},
	} {
		if err := tab.Set(c.s); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// TestIRQCloseReleasesEventfds checks Close drops every eventfd (no more
// signals, watchers gone) and leaves the table usable.
func TestIRQCloseReleasesEventfds(t *testing.T) {
	before := openFDs(t)
	tab := NewIRQTable()
	trigger, unmask := setupINTx(t, tab)
	tab.SetINTx(true)
	tab.Close()
	if n := pollCount(t, trigger); n != 1 {
		t.Fatalf("count %d before close", n)
	}
	signal(t, unmask)
	tab.SetINTx(true)
	if n := pollCount(t, trigger); n != 0 {
		t.Fatalf("closed table signalled %d", n)
	}
	if asserted, masked := tab.INTxState(); !asserted || masked {
		t.Fatalf("after close: asserted %v masked %v, want level kept and mask cleared", asserted, masked)
	}
	if got := openFDs(t); got != before+2 { // the test's own two eventfds
		t.Fatalf("%d descriptors open, want %d", got, before+2)
	}
	trigger2, _ := setupINTx(t, tab)
	if n := pollCount(t, trigger2); n != 1 {
		t.Fatalf("reused table: count %d, want 1 (line still asserted)", n)
	}
	tab.Close()
}
