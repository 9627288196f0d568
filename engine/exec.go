package engine

import (
	"errors"
	"fmt"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/gtt"
)

// Execution errors, carried in Fault.Err (wrapped with the details).
var (
	ErrBadArgs   = errors.New("engine: invalid command arguments")
	ErrBadKernel = errors.New("engine: kernel error")
)

// dmaChunk is how much a DMA stages through host memory at a time.
const dmaChunk = 1 << 20

// ringPos is the ring as one command saw it when it was fetched.
type ringPos struct {
	base             uint64
	size, head, tail uint32
	gen              uint64
}

// result is what one command did.
type result struct {
	op    uint16
	size  uint32       // bytes the command took in the ring
	drop  bool         // framing or fetch error: head jumps to the tail
	wrote []gtt.Extent // host extents written (possibly partly)
	code  uint32       // abi.Err* bit of a failure, 0 on success
	cuda  uint32       // its stream's CUDA code when not cudaCode's (stream.go)
	err   error

	stream  uint32 // the command's stream (0 without streams)
	skipped bool   // not run: its stream has an error (stream.go)

	fenced    bool
	fence     uint64
	interrupt bool
}

func fail(code uint32, err error) result { return result{code: code, err: err} }

// step fetches, executes and retires one command.
func (e *Engine) step() {
	e.mu.Lock()
	if !e.pendingLocked() {
		e.mu.Unlock()
		return
	}
	p := ringPos{base: e.r.ringBase, size: e.r.ringSize, head: e.r.head, tail: e.r.tail, gen: e.r.gen}
	e.executing = true
	e.mu.Unlock()

	res := e.fetchAndRun(p)
	if res.op == abi.OpLaunchGrid && res.code == 0 && !res.skipped && !res.drop {
		e.lastGrid = gridLaunch{known: true, offset: p.head, stream: res.stream}
	}
	if res.code != 0 {
		// The back end may have found an earlier launch's failure while
		// doing this command: that launch's fault goes first.
		e.launchFailed(res.err)
	}
	if len(res.wrote) > 0 && !res.fenced {
		e.unsynced = true // a FENCE's own write was synced by the FENCE
	}
	if res.code != 0 || (e.unsynced && e.drains(p, res)) {
		// The guest is about to learn of a failure (ERR_STATUS, the error
		// interrupt) or see the ring idle: first make what every retired
		// command wrote visible in host memory, as FENCE does (a GPU back
		// end keeps outputs on the device until then). A ring that drains
		// after commands that wrote no graphics memory (LAUNCH_GRID's
		// kernels write device-local memory only) needs none: its
		// kernels run on, and the next FENCE waits for them.
		if err := e.sync(); err != nil {
			e.log.Error().Err(err).Msg("engine: back end sync failed")
		}
	}
	if len(res.wrote) > 0 {
		e.cfg.Events.Wrote(res.wrote)
	}
	if res.code != 0 {
		// The stream's error is there before the guest can learn of
		// the failure.
		e.mu.Lock()
		e.noteStreamLocked(result{code: res.code, cuda: res.cuda, drop: res.drop, op: res.op, stream: res.stream})
		e.mu.Unlock()
		f := Fault{Code: res.code, RingOffset: p.head, Opcode: res.op, Err: res.err}
		e.log.Debug().Uint32("code", f.Code).Uint32("ring_offset", f.RingOffset).
			Uint16("opcode", f.Opcode).Bool("batch_dropped", res.drop).Err(f.Err).Msg("engine: command failed")
		e.cfg.Events.Faulted(f)
	}
	// Retire: RING_HEAD, CMDS_DONE and FENCE_DONE move together, so a
	// guest that sees the fence also sees the command counted (and the
	// error, reported above, before either).
	e.mu.Lock()
	if e.r.gen == p.gen { // else the ring was restarted under the command
		if res.drop {
			e.r.head = e.r.tail
		} else {
			e.r.head = (p.head + res.size) & (p.size - 1)
		}
	}
	e.r.cmdsDone++
	if res.fenced {
		e.r.fenceDone = res.fence
		e.noteStreamLocked(result{fenced: true, fence: res.fence, stream: res.stream})
	}
	e.mu.Unlock()
	if res.fenced {
		e.cfg.Events.FenceCompleted(res.fence, res.interrupt)
	}
	e.mu.Lock()
	e.executing = false
	e.notifyIdleLocked()
	e.mu.Unlock()
}

// drains reports whether retiring res leaves the ring empty (head reaches
// the latest tail). A doorbell racing with it at worst costs a needless
// back-end sync.
func (e *Engine) drains(p ringPos, res result) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return res.drop || (p.head+res.size)&(p.size-1) == e.r.tail
}

// fetchAndRun reads the command at p.head (docs/device-abi.md §5) and runs it.
func (e *Engine) fetchAndRun(p ringPos) result {
	hb := e.cmd[:abi.CmdHeaderSize]
	if err := e.readRing(p, p.head, hb); err != nil {
		r := fail(abi.ErrPageFault, fmt.Errorf("engine: fetching header: %w", err))
		r.drop = true
		return r
	}
	stream := e.takeStream(hb)
	h, err := DecodeHeader(hb)
	avail := (p.tail - p.head) & (p.size - 1)
	if err == nil && h.Size > avail {
		err = fmt.Errorf("%w: %d-byte command with %d bytes up to the tail", ErrMalformed, h.Size, avail)
	}
	var c Command
	if err == nil {
		if err = e.readRing(p, (p.head+abi.CmdHeaderSize)&(p.size-1), e.cmd[abi.CmdHeaderSize:h.Size]); err != nil {
			r := fail(abi.ErrPageFault, fmt.Errorf("engine: fetching command: %w", err))
			r.op, r.drop = h.Opcode, true
			return r
		}
		if h.Opcode != abi.OpLaunchGrid { // LAUNCH_GRID skips the interface (no allocation)
			c, err = Decode(e.cmd[:h.Size])
		}
	}
	if err != nil {
		r := fail(abi.ErrCommand, err)
		r.op, r.drop = h.Opcode, true
		return r
	}
	var r result
	switch {
	case h.Opcode != abi.OpFence && e.streamFailed(stream):
		r.skipped = true
	case h.Opcode == abi.OpLaunchGrid:
		r = e.execLaunchGrid(launchGridOf(e.cmd[abi.CmdHeaderSize:h.Size]))
	default:
		r = e.exec(c)
	}
	r.op, r.size, r.stream = h.Opcode, h.Size, stream
	return r
}

// readRing reads len(dst) bytes at ring offset off, wrapping at the end.
func (e *Engine) readRing(p ringPos, off uint32, dst []byte) error {
	for len(dst) > 0 {
		n := min(uint32(len(dst)), p.size-off)
		xs, err := e.scratchResolveGfx(p.base+uint64(off), uint64(n))
		if err != nil {
			return err
		}
		if err := e.cfg.Backend.Read(dst[:n], xs); err != nil {
			return e.backendErr(err)
		}
		dst, off = dst[n:], 0
	}
	return nil
}

func (e *Engine) backendErr(err error) error {
	e.log.Error().Err(err).Msg("engine: back end failed")
	return fmt.Errorf("engine: %s back end: %w", e.cfg.Backend.Name(), err)
}

// badRange reports whether [ga, ga+n) wraps around 2^64.
func badRange(ga, n uint64) bool { return ga+n < ga }

// exec runs one well-formed command.
func (e *Engine) exec(c Command) result {
	switch c := c.(type) {
	case Nop:
		return result{}
	case Copy:
		return e.execCopy(c)
	case Fill:
		return e.execFill(c)
	case DMA:
		if c.ToGfx {
			return e.execDMAToGfx(c)
		}
		return e.execDMAFromGfx(c)
	case Fence:
		return e.execFence(c)
	case KernelLoad:
		return e.execKernelLoad(c)
	case KernelUnload:
		return e.execKernelUnload(c)
	case Launch:
		return e.execLaunch(c)
	case KernelLoadModule:
		return e.execKernelLoadModule(c)
	case LaunchParams:
		return e.execLaunchParams(c)
	case LaunchGrid:
		return e.execLaunchGrid(c)
	}
	return fail(abi.ErrCommand, fmt.Errorf("%w: no handler for %T", ErrBadArgs, c))
}

// backendFail is a back-end failure of a command that may have written xs.
// The guest sees ERR_STATUS.COMMAND: the device could not carry it out;
// its stream answers what CUDA would: the sticky code of a lost context
// (StickyCode), else the code of a failed command.
func (e *Engine) backendFail(err error, xs []gtt.Extent) result {
	r := fail(abi.ErrCommand, e.backendErr(err))
	r.cuda = StickyCode(err)
	r.wrote = xs
	return r
}

func (e *Engine) execCopy(c Copy) result {
	if c.Len == 0 {
		return result{}
	}
	if badRange(c.Src, c.Len) || badRange(c.Dst, c.Len) {
		return fail(abi.ErrCommand, fmt.Errorf("%w: COPY range overflows", ErrBadArgs))
	}
	src, err := e.resolve(c.Src, c.Len, false)
	if err != nil {
		return fail(abi.ErrPageFault, err)
	}
	dst, err := e.resolve(c.Dst, c.Len, true)
	if err != nil {
		return fail(abi.ErrPageFault, err)
	}
	if err := e.cfg.Backend.Copy(dst, src); err != nil {
		return e.backendFail(err, dst)
	}
	return result{wrote: dst}
}

func (e *Engine) execFill(c Fill) result {
	if c.Dst%4 != 0 || c.Len%4 != 0 {
		return fail(abi.ErrCommand, fmt.Errorf("%w: FILL at %#x of %#x bytes not 4-byte aligned", ErrBadArgs, c.Dst, c.Len))
	}
	if c.Len == 0 {
		return result{}
	}
	if badRange(c.Dst, c.Len) {
		return fail(abi.ErrCommand, fmt.Errorf("%w: FILL range overflows", ErrBadArgs))
	}
	dst, err := e.resolve(c.Dst, c.Len, true)
	if err != nil {
		return fail(abi.ErrPageFault, err)
	}
	if err := e.cfg.Backend.Fill(dst, c.Pattern); err != nil {
		return e.backendFail(err, dst)
	}
	return result{wrote: dst}
}

// dmaCheck validates a DMA's ranges.
func (e *Engine) dmaCheck(c DMA) (result, bool) {
	if badRange(c.GA, c.Len) || badRange(c.GPA, c.Len) {
		return fail(abi.ErrCommand, fmt.Errorf("%w: DMA range overflows", ErrBadArgs)), false
	}
	if e.cfg.RAM == nil {
		return fail(abi.ErrDMA, errors.New("engine: no guest memory mapped")), false
	}
	return result{}, true
}

func (e *Engine) stageBuf(n uint64) []byte {
	if uint64(cap(e.stage)) < n {
		e.stage = make([]byte, min(n, dmaChunk))
	}
	return e.stage[:n]
}

func (e *Engine) execDMAToGfx(c DMA) result {
	if c.Len == 0 {
		return result{}
	}
	if r, ok := e.dmaCheck(c); !ok {
		return r
	}
	xs, err := e.resolve(c.GA, c.Len, true)
	if err != nil {
		return fail(abi.ErrPageFault, err)
	}
	cur := cursor{xs: xs}
	for done := uint64(0); done < c.Len; {
		k := min(c.Len-done, dmaChunk)
		buf := e.stageBuf(k)
		if err := e.cfg.RAM.ReadAt(buf, c.GPA+done); err != nil {
			r := fail(abi.ErrDMA, fmt.Errorf("engine: DMA reading guest %#x+%#x: %w", c.GPA+done, k, err))
			r.wrote = sliceExtents(xs, 0, done)
			return r
		}
		if err := e.cfg.Backend.Write(cur.next(k), buf); err != nil {
			return e.backendFail(err, sliceExtents(xs, 0, done+k))
		}
		done += k
	}
	return result{wrote: xs}
}

func (e *Engine) execDMAFromGfx(c DMA) result {
	if c.Len == 0 {
		return result{}
	}
	if r, ok := e.dmaCheck(c); !ok {
		return r
	}
	xs, err := e.resolve(c.GA, c.Len, false)
	if err != nil {
		return fail(abi.ErrPageFault, err)
	}
	cur := cursor{xs: xs}
	for done := uint64(0); done < c.Len; {
		k := min(c.Len-done, dmaChunk)
		buf := e.stageBuf(k)
		if err := e.cfg.Backend.Read(buf, cur.next(k)); err != nil {
			return e.backendFail(err, nil)
		}
		if err := e.cfg.RAM.WriteAt(buf, c.GPA+done); err != nil {
			return fail(abi.ErrDMA, fmt.Errorf("engine: DMA writing guest %#x+%#x: %w", c.GPA+done, k, err))
		}
		done += k
	}
	return result{}
}

// execFence retires a fence (§6.4). Every earlier command has returned from
// the back end; Sync makes sure an asynchronous back end has finished them
// (and the fence's own write) before FENCE_DONE moves. With WRITE_MEM a
// first Sync comes before the write: the write is how a guest polling
// memory learns the fence retired, so earlier kernels must have finished,
// and a failure that Sync finds must be reported (§6.10), before it lands
// (a back end may store the value in host memory at once).
func (e *Engine) execFence(c Fence) result {
	var wrote []gtt.Extent
	if c.WriteMem {
		if c.Addr%8 != 0 || badRange(c.Addr, 8) {
			return fail(abi.ErrCommand, fmt.Errorf("%w: FENCE address %#x not 8-byte aligned", ErrBadArgs, c.Addr))
		}
		xs, err := e.resolve(c.Addr, 8, true)
		if err != nil {
			return fail(abi.ErrPageFault, err)
		}
		if err := e.sync(); err != nil {
			return e.backendFail(err, nil)
		}
		var b [8]byte
		le.PutUint64(b[:], c.Value)
		if err := e.cfg.Backend.Write(xs, b[:]); err != nil {
			return e.backendFail(err, xs)
		}
		wrote = xs
	}
	if err := e.sync(); err != nil {
		return e.backendFail(err, wrote)
	}
	return result{wrote: wrote, fenced: true, fence: c.Value, interrupt: c.Interrupt}
}
