package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Check is the outcome of one suite check.
type Check struct {
	Name     string
	Pass     bool
	Skipped  bool   // the transport cannot do what the check needs
	Detail   string // why it failed or was skipped
	Duration time.Duration
}

// Report is the outcome of Suite.
type Report struct {
	Checks   []Check
	Duration time.Duration
}

// OK reports whether no check failed.
func (r Report) OK() bool { return len(r.Failed()) == 0 }

// Failed lists the checks that failed.
func (r Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.Pass && !c.Skipped {
			out = append(out, c)
		}
	}
	return out
}

// String formats the report one check per line.
func (r Report) String() string {
	var b strings.Builder
	pass, fail, skip := 0, 0, 0
	for _, c := range r.Checks {
		verdict := "PASS"
		switch {
		case c.Skipped:
			verdict, skip = "SKIP", skip+1
		case !c.Pass:
			verdict, fail = "FAIL", fail+1
		default:
			pass++
		}
		fmt.Fprintf(&b, "%-4s %-24s %10s", verdict, c.Name, c.Duration.Round(time.Microsecond))
		if c.Detail != "" {
			fmt.Fprintf(&b, "  %s", c.Detail)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%d passed, %d failed, %d skipped in %s\n", pass, fail, skip, r.Duration.Round(time.Microsecond))
	return b.String()
}

// errSkip marks a check the transport cannot run.
type errSkip struct{ why string }

func (e errSkip) Error() string { return e.why }

// suiteScratch is the graphics memory the suite works in.
const suiteScratch = 256 << 10

// suite is the state the checks share: a scratch allocation mirrored by a
// reference model (ref[i] models graphics address base+i).
type suite struct {
	ctx  context.Context
	d    *Driver
	base uint64
	ref  []byte
	rng  *rand.Rand
}

type suiteCheck struct {
	name string
	run  func(s *suite) error
}

// Suite runs every command and kernel against the device, with sizes that
// cross pages, ring wrap-around, fences that write memory and interrupt, DMA
// both ways and the device's refusals, checking results against ref.go. It
// leaves the driver usable and frees what it allocated.
func Suite(ctx context.Context, d *Driver) Report {
	start := time.Now()
	var r Report
	s := &suite{ctx: ctx, d: d, ref: make([]byte, suiteScratch), rng: rand.New(rand.NewPCG(1, 2))}
	base, err := d.Alloc(suiteScratch)
	if err != nil {
		r.Checks = append(r.Checks, Check{Name: "setup", Detail: err.Error()})
		r.Duration = time.Since(start)
		return r
	}
	s.base = base
	defer d.Free(base)
	if err := s.randomize(0, suiteScratch); err != nil {
		r.Checks = append(r.Checks, Check{Name: "setup", Detail: err.Error()})
		r.Duration = time.Since(start)
		return r
	}
	for _, c := range suiteChecks() {
		if ctx.Err() != nil {
			r.Checks = append(r.Checks, Check{Name: c.name, Detail: ctx.Err().Error()})
			continue
		}
		t := time.Now()
		err := c.run(s)
		ch := Check{Name: c.name, Pass: err == nil, Duration: time.Since(t)}
		var skip errSkip
		switch {
		case errors.As(err, &skip):
			ch.Skipped, ch.Detail = true, skip.why
		case err != nil:
			ch.Detail = err.Error()
			// Leave the next check a clean device.
			_ = d.CheckErrors()
		}
		r.Checks = append(r.Checks, ch)
	}
	r.Duration = time.Since(start)
	return r
}

func suiteChecks() []suiteCheck {
	return []suiteCheck{
		{"identity", checkIdentity},
		{"registers", checkRegisters},
		{"gtt-readback", checkGTTReadback},
		{"aperture", checkAperture},
		{"fill", checkFill},
		{"copy", checkCopy},
		{"dma-to-gfx", checkDMAToGfx},
		{"dma-from-gfx", checkDMAFromGfx},
		{"fence-write-mem", checkFenceWriteMem},
		{"fence-interrupt", checkFenceInterrupt},
		{"cmds-done", checkCmdsDone},
		{"kernel-saxpy", checkSaxpy},
		{"kernel-stencil", checkStencil},
		{"kernel-render", checkRender},
		{"kernel-errors", checkKernelErrors},
		{"ring-wrap", checkRingWrap},
		{"page-fault", checkPageFault},
		{"dma-fault", checkDMAFault},
		{"gtt-refused", checkGTTRefused},
		{"malformed-command", checkMalformed},
		{"doorbell-refused", checkDoorbell},
		{"mmio-refused", checkMMIO},
		{"recovery", checkRecovery},
	}
}

// sync fences and waits, expecting no device error.
func (s *suite) sync() error { return s.d.Wait(s.ctx, s.d.Fence(0)) }

// expectDeviceError fences, waits and expects a device error with the bits
// in want; it returns the error for further checks.
func (s *suite) expectDeviceError(want uint32) (*DeviceError, error) {
	err := s.sync()
	var de *DeviceError
	if !errors.As(err, &de) {
		return nil, fmt.Errorf("wait returned %v, want a device error %s", err, ErrBitNames(want))
	}
	if !de.Has(want) {
		return de, fmt.Errorf("device error %s, want %s", ErrBitNames(de.Status), ErrBitNames(want))
	}
	return de, nil
}

// expect compares graphics memory [base+off, +n) with the model.
func (s *suite) expect(off, n uint64) error {
	got := make([]byte, n)
	if err := s.d.ReadGA(s.base+off, got); err != nil {
		return err
	}
	if i := firstDiff(got, s.ref[off:off+n]); i >= 0 {
		return fmt.Errorf("graphics address %#x: got %#02x, model %#02x", s.base+off+uint64(i), got[i], s.ref[off+uint64(i)])
	}
	return nil
}

// expectAll compares the whole scratch area with the model.
func (s *suite) expectAll() error { return s.expect(0, uint64(len(s.ref))) }

// randomize fills [off, +n) of scratch with random bytes by CPU stores,
// mirrored in the model.
func (s *suite) randomize(off, n uint64) error {
	b := s.ref[off : off+n]
	for i := range b {
		b[i] = byte(s.rng.Uint32())
	}
	return s.d.WriteGA(s.base+off, b)
}

// firstDiff is the index of the first differing byte, or -1.
func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
