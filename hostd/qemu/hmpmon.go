package qemu

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// A readline HMP monitor for commands sent without waiting for each
// answer.
//
// The front end's restore on a migration's destination (frontend.go) is
// some twenty HMP port accesses issued while the VM is paused. QEMU reads
// a monitor's input one byte per pass of its I/O loop (monitor_can_read
// answers 1), about 4 µs a byte under TCG (TestMonitorInputCost), so a
// command costs in proportion to its length: 80-90 bytes as QMP's
// human-monitor-command, 11-22 bytes as a line typed to a readline HMP
// monitor. gmigd gives every QEMU it starts one such monitor
// (RunDir/HMPSocket) and talks to it with hmpMonitor: a batch's lines are
// written at once and each answer is read back up to the next prompt.
//
// What QEMU 11 sends, as seen on a real one: on each connection a banner
// ("QEMU 11.1.3 monitor - type 'help' for more information\r\n") and the
// prompt "(qemu) "; for each line, readline's echo of every byte typed
// (the line so far, redrawn after ESC [ D cursor moves and ending in
// ESC [ K, clear to end of line), "\r\n" once the line ended, the
// command's output with "\r\n" line ends, and the next prompt. A
// connection starts with an empty line: what an earlier client left
// unfinished is dropped, not run. The echo is replayed as a terminal
// would show it and must read as the line sent, which keeps the answers
// in step with the lines.
//
// Writing a whole batch at once is safe: QEMU takes a readline monitor's
// input a byte at a time and runs each line as its end arrives, in order;
// what it has not read waits in the socket's buffer, and its output is
// buffered on its side when the socket is full.

// HMPSocket is the name, in a VM's RunDir, of the readline HMP monitor's
// socket.
const HMPSocket = "hmp.sock"

// hmpChardev is the id of the HMP monitor's chardev on QEMU's command
// line.
const hmpChardev = "gmig-hmp"

// hmpArgs are the QEMU options of the readline HMP monitor in runDir.
func hmpArgs(runDir string) []string {
	return []string{
		"-chardev", "socket,id=" + hmpChardev + ",path=" + filepath.Join(runDir, HMPSocket) + ",server=on,wait=off",
		"-mon", "chardev=" + hmpChardev + ",mode=readline",
	}
}

// hmpPrompt is readline's prompt for QEMU's monitor (monitor/hmp.c).
const hmpPrompt = "(qemu) "

// hmpMaxAnswer bounds what is read for one line before its prompt: a
// port access's echo and answer are a few hundred bytes to 2 KiB (the
// echo grows with the square of the line's length); more is garbage.
const hmpMaxAnswer = 64 << 10

// ErrHMPProtocol: what the HMP monitor sent made no sense (no prompt, an
// echo of another line, too long an answer); the monitor is closed.
var ErrHMPProtocol = errors.New("qemu: HMP monitor: unexpected output")

// hmpMonitor is a client of a readline HMP monitor that pipelines lines.
// It is safe for concurrent use; batches run one at a time.
type hmpMonitor struct {
	mu      sync.Mutex // held for a batch
	conn    net.Conn
	pending []byte        // read, not yet taken
	timeout time.Duration // the banner's limit, and a batch's
	broken  error         // set once the stream is out of step; the conn is closed
}

// dialHMPMonitor connects to the readline HMP monitor at path and reads
// the banner up to the first prompt, within timeout; timeout bounds each
// batch too.
func dialHMPMonitor(path string, timeout time.Duration) (*hmpMonitor, error) {
	conn, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return nil, fmt.Errorf("qemu: HMP monitor: %w", err)
	}
	m, err := newHMPMonitor(conn, timeout)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return m, nil
}

// newHMPMonitor reads the banner from a new connection to a readline HMP
// monitor, up to the first prompt.
func newHMPMonitor(conn net.Conn, timeout time.Duration) (*hmpMonitor, error) {
	m := &hmpMonitor{conn: conn, timeout: timeout}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := m.untilPrompt(); err != nil {
		return nil, fmt.Errorf("qemu: HMP monitor: reading the banner: %w", err)
	}
	return m, nil
}

// run sends the lines at once and returns each one's output (line ends
// as "\n"; "" for none), in order. HMP reports a refused command as text,
// which the caller judges. A line that cannot be typed (empty, or with
// a control character) is refused before anything is sent. A broken
// stream (closed, garbage, timeout) is an error naming the first line
// left without an answer, and closes the monitor.
func (m *hmpMonitor) run(lines []string) ([]string, error) {
	var buf bytes.Buffer
	for i, l := range lines {
		if l == "" || strings.ContainsFunc(l, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, fmt.Errorf("qemu: HMP line %d %q: empty or with a control character", i, l)
		}
		buf.WriteString(l)
		buf.WriteByte('\n')
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.broken != nil {
		return nil, m.broken
	}
	_ = m.conn.SetDeadline(time.Now().Add(m.timeout))
	if _, err := m.conn.Write(buf.Bytes()); err != nil {
		return nil, m.breakLocked(fmt.Errorf("qemu: HMP monitor: sending %d lines: %w", len(lines), err))
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		seg, err := m.untilPrompt()
		if err != nil {
			return out, m.breakLocked(fmt.Errorf("qemu: HMP line %d %q: %w", i, l, err))
		}
		echo, answer, ok := strings.Cut(seg, "\r\n")
		if !ok {
			return out, m.breakLocked(fmt.Errorf("%w: HMP line %d %q: a prompt before the line's end: %q", ErrHMPProtocol, i, l, seg))
		}
		if typed := terminalLine(echo); typed != l {
			return out, m.breakLocked(fmt.Errorf("%w: HMP line %d %q: echoed as %q", ErrHMPProtocol, i, l, typed))
		}
		out[i] = strings.ReplaceAll(answer, "\r\n", "\n")
	}
	return out, nil
}

// untilPrompt returns what comes before the next prompt, reading as
// needed (the prompt may come split over reads), and keeps what follows
// it. The connection's deadline bounds it.
func (m *hmpMonitor) untilPrompt() (string, error) {
	var chunk [4096]byte
	for {
		if i := bytes.Index(m.pending, []byte(hmpPrompt)); i >= 0 {
			seg := string(m.pending[:i])
			m.pending = m.pending[i+len(hmpPrompt):]
			return seg, nil
		}
		if len(m.pending) > hmpMaxAnswer {
			return "", fmt.Errorf("%w: %d bytes without a prompt", ErrHMPProtocol, len(m.pending))
		}
		n, err := m.conn.Read(chunk[:])
		m.pending = append(m.pending, chunk[:n]...)
		if err != nil && n == 0 {
			return "", fmt.Errorf("waiting for the prompt after %q: %w", tail(m.pending), err)
		}
	}
}

// tail is the end of b for an error message.
func tail(b []byte) string {
	const n = 80
	if len(b) > n {
		return "…" + string(b[len(b)-n:])
	}
	return string(b)
}

// breakLocked records that the stream is out of step and closes it.
func (m *hmpMonitor) breakLocked(err error) error {
	m.broken = fmt.Errorf("qemu: HMP monitor unusable after: %w", err)
	_ = m.conn.Close()
	return err
}

// close ends the connection; a batch in flight fails at once.
func (m *hmpMonitor) close() error { return m.conn.Close() }

// terminalLine is the line a terminal shows after echo: printable bytes
// overwrite at the cursor, ESC [ D and ESC [ C move it left and right,
// ESC [ K clears to the line's end, backspace moves left and a carriage
// return to the start; other escape sequences are skipped.
func terminalLine(echo string) string {
	var line []byte
	cur := 0
	for i := 0; i < len(echo); i++ {
		c := echo[i]
		switch {
		case c == 0x1b:
			// A CSI sequence: ESC [ parameters final (0x40-0x7e).
			if i+1 >= len(echo) || echo[i+1] != '[' {
				i++ // ESC and one byte
				continue
			}
			j := i + 2
			for j < len(echo) && (echo[j] < 0x40 || echo[j] > 0x7e) {
				j++
			}
			if j == len(echo) {
				return string(line) // cut short: nothing more to show
			}
			switch echo[j] {
			case 'D':
				cur = max(cur-1, 0)
			case 'C':
				cur = min(cur+1, len(line))
			case 'K':
				line = line[:cur]
			}
			i = j
		case c == '\b':
			cur = max(cur-1, 0)
		case c == '\r':
			cur = 0
		case c < 0x20 || c == 0x7f:
			// other controls (a bell) show nothing
		default:
			if cur < len(line) {
				line[cur] = c
			} else {
				line = append(line, c)
			}
			cur++
		}
	}
	return string(line)
}
