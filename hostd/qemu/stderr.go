package qemu

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"
)

// What QEMU says when it fails — a bad option, firmware it cannot find, a
// migration stream it cannot load — goes to its stderr, on the host that
// ran it. gmigd keeps the last lines of it beside the console and puts
// them in the error of whatever QEMU's end broke off: `vm start`, and a
// migration whose destination QEMU died (the source's error carries the
// destination's).

// keptStderrLines is how many of QEMU's last stderr lines an error quotes:
// enough for QEMU's own error and the warnings before it (QEMU 11.1 prints
// one line per error, prefixed with the program name and the option).
const keptStderrLines = 20

// maxStderrLine bounds one kept line, so a QEMU that writes without
// newlines cannot grow the tail without end.
const maxStderrLine = 1024

// exitGrace is how long an error from a closed monitor connection waits
// for QEMU's exit to be reaped: QEMU closes the socket a moment before it
// ends.
const exitGrace = time.Second

// lastLines keeps the last lines written to it.
type lastLines struct {
	mu      sync.Mutex
	lines   []string
	partial []byte
}

func (l *lastLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.partial = append(l.partial, p[:min(len(p), maxStderrLine-len(l.partial))]...)
			break
		}
		l.partial = append(l.partial, p[:min(i, maxStderrLine-len(l.partial))]...)
		l.add(string(l.partial))
		l.partial = l.partial[:0]
		p = p[i+1:]
	}
	return n, nil
}

func (l *lastLines) add(s string) {
	if s = strings.TrimRight(s, "\r"); s == "" {
		return
	}
	l.lines = append(l.lines, s)
	if len(l.lines) > keptStderrLines {
		l.lines = l.lines[len(l.lines)-keptStderrLines:]
	}
}

// Lines returns the kept lines, a last one without its newline included.
func (l *lastLines) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]string(nil), l.lines...)
	if s := strings.TrimRight(string(l.partial), "\r"); s != "" {
		out = append(out, s)
	}
	return out[max(0, len(out)-keptStderrLines):]
}

// StderrPrefix begins each line of QEMU's stderr in the console log. The
// guest's serial console goes to the same file straight from QEMU, so a
// line of QEMU's can land while the guest is half-way through one of its
// own: each of QEMU's lines is written whole, in one write, behind this
// prefix, and a reader that wants the guest's output alone cuts from the
// prefix to the end of that line (cluster.JoinConsoles does).
const StderrPrefix = "--- qemu: "

// maxConsoleLine bounds a line of QEMU's stderr held back for its end: a
// longer one goes to the console in parts, each a line of its own.
const maxConsoleLine = 64 << 10

// prefixedLines writes each line written to it to w whole, in one write,
// behind StderrPrefix. Errors writing w are dropped: the console is a
// record, and QEMU's stderr must keep flowing to the kept tail.
type prefixedLines struct {
	mu      sync.Mutex
	w       io.Writer
	partial []byte
}

func (p *prefixedLines) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			take := min(len(b), maxConsoleLine-len(p.partial))
			p.partial = append(p.partial, b[:take]...)
			b = b[take:]
			if len(p.partial) == maxConsoleLine {
				p.emit()
			}
			continue
		}
		p.partial = append(p.partial, b[:i]...)
		p.emit()
		b = b[i+1:]
	}
	return n, nil
}

// flush writes a last line QEMU left without its newline.
func (p *prefixedLines) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.partial) > 0 {
		p.emit()
	}
}

func (p *prefixedLines) emit() {
	line := make([]byte, 0, len(StderrPrefix)+len(p.partial)+1)
	line = append(append(append(line, StderrPrefix...), p.partial...), '\n')
	_, _ = p.w.Write(line)
	p.partial = p.partial[:0]
}

// ConsoleStderr returns a writer that puts what QEMU writes to its stderr
// into the console log w as gmigd does: each line whole, in one write,
// behind StderrPrefix (a last line without its newline stays held).
func ConsoleStderr(w io.Writer) io.Writer { return &prefixedLines{w: w} }

// stderrTo returns the writer QEMU's stderr goes to: serial (the console
// file, nil for none), each line behind StderrPrefix, and the kept tail.
func (vm *VM) stderrTo(serial io.Writer) io.Writer {
	if serial == nil {
		return vm.stderr
	}
	vm.console = &prefixedLines{w: serial}
	return io.MultiWriter(vm.console, vm.stderr)
}

// LastOutput returns the last lines QEMU wrote to its stderr (none for an
// adopted VM, whose stderr is its owner's).
func (vm *VM) LastOutput() []string {
	if vm.stderr == nil {
		return nil
	}
	return vm.stderr.Lines()
}

// exitReason describes how QEMU ended: its exit status and its last
// stderr lines. QEMU must have ended (done closed).
func (vm *VM) exitReason() string {
	why := "QEMU ended"
	if vm.err != nil {
		why = "QEMU ended: " + vm.err.Error()
	}
	if lines := vm.LastOutput(); len(lines) > 0 {
		why += "; its last words: " + strings.Join(lines, " | ")
	}
	return why
}

// ended adds how QEMU ended to err, an error from the monitor connection or
// an event wait, when QEMU has ended or ends within grace; otherwise err is
// returned as it is.
func (vm *VM) ended(err error, grace time.Duration) error {
	if err == nil || vm.cmd == nil {
		return err
	}
	select {
	case <-vm.done:
	default:
		if grace <= 0 {
			return err
		}
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-vm.done:
		case <-t.C:
			return err
		}
	}
	return fmt.Errorf("%w (%s)", err, vm.exitReason())
}

// connectionLost reports whether err from a QMP command is the monitor
// connection's end rather than QEMU's answer.
func connectionLost(err error) bool {
	var op *net.OpError
	return errors.Is(err, ErrGone) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.As(err, &op)
}
