package qemu

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"
)

// A second QMP monitor for commands sent without waiting for each reply.
//
// go-qemu's SocketMonitor runs one command at a time: it writes it and
// holds its lock until the reply came, a round trip of about half a
// millisecond through QEMU's monitor thread and main loop. The front end's
// restore on a migration's destination (frontend.go) is some twenty HMP
// commands issued while the VM is paused, so gmigd gives every QEMU it
// starts a second monitor (RunDir/qmp-batch.sock) and talks to it with
// batchMonitor: all of a batch's commands are written at once, each with
// an "id", and the replies are read back in order.
//
// What this saves is the client's wait between commands; QEMU's own cost
// stays: it reads a monitor's input one byte per pass of its I/O loop
// (monitor_can_read answers 1), so a command costs in proportion to its
// length, about 4 µs a byte under TCG (TestMonitorInputCost).
//
// Writing a whole batch at once is safe: QEMU parses a monitor's input
// and queues at most 8 in-band commands for it (QMP_REQ_QUEUE_LEN_MAX,
// QEMU's monitor/qmp.c; one without the "oob" capability), then stops
// reading that monitor until the main loop has dispatched one; what it has
// not read waits in the socket's buffer. Replies to in-band commands come
// in the order the commands were sent (QMP specification, "Commands
// Responses"); events may come between them and are skipped.

// BatchSocket is the name, in a VM's RunDir, of the second QMP monitor's
// socket.
const BatchSocket = "qmp-batch.sock"

// Errors of the batch monitor callers branch on.
var (
	// ErrBatchProtocol: QEMU's answer made no sense (not JSON, not a
	// reply, an id out of order); the monitor is closed.
	ErrBatchProtocol = errors.New("qemu: batch monitor: unexpected answer")
)

// BatchCommandError is QMP's error reply to one command of a batch.
type BatchCommandError struct {
	Index   int    // the command's place in the batch
	Command string // its "execute" and arguments, as sent
	Class   string // QMP's error class
	Desc    string // QMP's description
}

func (e *BatchCommandError) Error() string {
	return fmt.Sprintf("qemu: batch command %d %s: %s: %s", e.Index, e.Command, e.Class, e.Desc)
}

// batchCommand is one command of a batch.
type batchCommand struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
	ID        uint64 `json:"id"`
}

// batchMonitor is a QMP client that pipelines commands. It is safe for
// concurrent use; batches run one at a time.
type batchMonitor struct {
	mu      sync.Mutex // held for a batch
	conn    net.Conn
	dec     *json.Decoder
	nextID  uint64
	timeout time.Duration // a batch's limit, writes and replies together
	broken  error         // set once the stream is out of step; the conn is closed
}

// dialBatchMonitor connects to the QMP socket at path and negotiates
// capabilities (with "oob" when QEMU offers it: only then does it queue
// more than one command, monitor/qmp.c). timeout bounds the handshake and,
// later, each batch.
func dialBatchMonitor(path string, timeout time.Duration) (*batchMonitor, error) {
	conn, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return nil, fmt.Errorf("qemu: batch monitor: %w", err)
	}
	m := &batchMonitor{conn: conn, dec: json.NewDecoder(conn), timeout: timeout}
	if err := m.handshake(); err != nil {
		conn.Close()
		return nil, err
	}
	return m, nil
}

// handshake reads QEMU's greeting and leaves capabilities negotiation.
func (m *batchMonitor) handshake() error {
	_ = m.conn.SetDeadline(time.Now().Add(m.timeout))
	var greeting struct {
		QMP *struct {
			Capabilities []string `json:"capabilities"`
		} `json:"QMP"`
	}
	if err := m.dec.Decode(&greeting); err != nil {
		return fmt.Errorf("%w: reading the greeting: %v", ErrBatchProtocol, err)
	}
	if greeting.QMP == nil {
		return fmt.Errorf("%w: no QMP greeting", ErrBatchProtocol)
	}
	var args any
	if slices.Contains(greeting.QMP.Capabilities, "oob") {
		args = map[string][]string{"enable": {"oob"}}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.runLocked([]batchCommand{{Execute: "qmp_capabilities", Arguments: args}}); err != nil {
		return fmt.Errorf("qemu: batch monitor: negotiating capabilities: %w", err)
	}
	return nil
}

// run sends the commands (execute and arguments each) at once and
// returns their "return" values in order. A command QEMU refused is a
// *BatchCommandError naming it (the first such one; the later commands
// ran, and their values are returned beside the error). A broken stream
// (closed, garbage, timeout) is an error naming the first command left
// without a reply, and closes the monitor.
func (m *batchMonitor) run(cmds []batchCommand) ([]json.RawMessage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runLocked(cmds)
}

func (m *batchMonitor) runLocked(cmds []batchCommand) ([]json.RawMessage, error) {
	if m.broken != nil {
		return nil, m.broken
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // one line per command
	for i := range cmds {
		m.nextID++
		cmds[i].ID = m.nextID
		if err := enc.Encode(cmds[i]); err != nil {
			return nil, fmt.Errorf("qemu: batch command %d %s: %w", i, cmds[i].Execute, err)
		}
	}
	_ = m.conn.SetDeadline(time.Now().Add(m.timeout))
	if _, err := m.conn.Write(buf.Bytes()); err != nil {
		return nil, m.breakLocked(fmt.Errorf("qemu: batch monitor: sending %d commands: %w", len(cmds), err))
	}
	out := make([]json.RawMessage, len(cmds))
	var cmdErr error
	for i := 0; i < len(cmds); {
		var msg struct {
			Event  string          `json:"event"`
			ID     *uint64         `json:"id"`
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
		}
		if err := m.dec.Decode(&msg); err != nil {
			return out, m.breakLocked(fmt.Errorf("%w: reply to command %d %s: %v", ErrBatchProtocol, i, describe(cmds[i]), err))
		}
		switch {
		case msg.Event != "":
			continue // events go to the main monitor's readers
		case msg.ID == nil || *msg.ID != cmds[i].ID:
			return out, m.breakLocked(fmt.Errorf("%w: reply to command %d %s has id %s, want %d",
				ErrBatchProtocol, i, describe(cmds[i]), idString(msg.ID), cmds[i].ID))
		case msg.Error != nil:
			if cmdErr == nil {
				cmdErr = &BatchCommandError{Index: i, Command: describe(cmds[i]), Class: msg.Error.Class, Desc: msg.Error.Desc}
			}
		case msg.Return == nil:
			return out, m.breakLocked(fmt.Errorf("%w: reply to command %d %s has neither return nor error",
				ErrBatchProtocol, i, describe(cmds[i])))
		default:
			out[i] = msg.Return
		}
		i++
	}
	return out, cmdErr
}

// breakLocked records that the stream is out of step and closes it.
func (m *batchMonitor) breakLocked(err error) error {
	m.broken = fmt.Errorf("qemu: batch monitor unusable after: %w", err)
	_ = m.conn.Close()
	return err
}

// close ends the connection; a batch in flight fails at once.
func (m *batchMonitor) close() error { return m.conn.Close() }

// describe is a command as an error message shows it.
func describe(c batchCommand) string {
	if c.Arguments == nil {
		return c.Execute
	}
	a, _ := json.Marshal(c.Arguments)
	return c.Execute + " " + string(a)
}

func idString(id *uint64) string {
	if id == nil {
		return "none"
	}
	return fmt.Sprint(*id)
}
