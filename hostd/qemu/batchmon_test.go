package qemu

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeQMP is a QMP server on a UNIX socket for one client: it greets,
// answers qmp_capabilities, then hands the connection to serve.
type fakeQMP struct {
	path string
	caps []string // offered in the greeting
	// gotCaps is the qmp_capabilities request's arguments.
	gotCaps chan json.RawMessage
	errs    chan error // serve's verdict (nil: fine)
}

// fakeRequest is a request as the fake server reads it.
type fakeRequest struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id"`
}

func newFakeQMP(t *testing.T, caps []string, serve func(r *bufio.Reader, c net.Conn) error) *fakeQMP {
	t.Helper()
	f := &fakeQMP{path: filepath.Join(t.TempDir(), "qmp.sock"), caps: caps,
		gotCaps: make(chan json.RawMessage, 1), errs: make(chan error, 1)}
	l, err := net.Listen("unix", f.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			f.errs <- err
			return
		}
		defer c.Close()
		greeting, _ := json.Marshal(map[string]any{"QMP": map[string]any{"version": map[string]any{}, "capabilities": caps}})
		if _, err := c.Write(append(greeting, '\n')); err != nil {
			f.errs <- err
			return
		}
		r := bufio.NewReader(c)
		req, err := readRequest(r)
		if err != nil {
			f.errs <- err
			return
		}
		if req.Execute != "qmp_capabilities" {
			f.errs <- fmt.Errorf("first command %q, want qmp_capabilities", req.Execute)
			return
		}
		f.gotCaps <- req.Arguments
		if err := reply(c, req.ID, `"return":{}`); err != nil {
			f.errs <- err
			return
		}
		f.errs <- serve(r, c)
	}()
	return f
}

func readRequest(r *bufio.Reader) (fakeRequest, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return fakeRequest{}, err
	}
	var req fakeRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return req, fmt.Errorf("request %q: %w", line, err)
	}
	if len(req.ID) == 0 {
		return req, fmt.Errorf("request %q without an id", line)
	}
	return req, nil
}

// reply writes {body,"id":id}.
func reply(c net.Conn, id json.RawMessage, body string) error {
	_, err := fmt.Fprintf(c, "{%s, \"id\": %s}\n", body, id)
	return err
}

const fakeEvent = `{"event": "MIGRATION", "data": {"status": "active"}, "timestamp": {"seconds": 1, "microseconds": 2}}` + "\n"

// readAll reads n requests: the batch must be all there before a reply.
func readAll(r *bufio.Reader, n int) ([]fakeRequest, error) {
	reqs := make([]fakeRequest, n)
	for i := range reqs {
		var err error
		if reqs[i], err = readRequest(r); err != nil {
			return nil, fmt.Errorf("request %d of %d: %w", i, n, err)
		}
	}
	return reqs, nil
}

func hmpBatch(n int) []batchCommand {
	cmds := make([]batchCommand, n)
	for i := range cmds {
		cmds[i] = batchCommand{Execute: "human-monitor-command", Arguments: map[string]string{"command-line": fmt.Sprintf("i /w %#x", 0xcf8+i)}}
	}
	return cmds
}

// TestBatchMonitorPipelines: a batch's commands all reach QEMU before it
// answers the first (the server sends nothing until it has read them
// all: a client waiting for each reply would time out), events between
// the replies are skipped, the values come back in order, and "oob" is
// enabled where offered.
func TestBatchMonitorPipelines(t *testing.T) {
	const n = 12
	f := newFakeQMP(t, []string{"oob"}, func(r *bufio.Reader, c net.Conn) error {
		for range 2 { // two batches on one connection
			reqs, err := readAll(r, n)
			if err != nil {
				return err
			}
			for i, q := range reqs {
				if i%3 == 0 {
					if _, err := c.Write([]byte(fakeEvent)); err != nil {
						return err
					}
				}
				var a struct {
					Line string `json:"command-line"`
				}
				if err := json.Unmarshal(q.Arguments, &a); err != nil {
					return err
				}
				if err := reply(c, q.ID, fmt.Sprintf(`"return": %q`, "answer to "+a.Line)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	m, err := dialBatchMonitor(f.path, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	if got := string(<-f.gotCaps); got != `{"enable":["oob"]}` {
		t.Errorf("qmp_capabilities arguments %s, want oob enabled", got)
	}
	for b := range 2 {
		out, err := m.run(hmpBatch(n))
		if err != nil {
			t.Fatalf("batch %d: %v", b, err)
		}
		for i, raw := range out {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil || s != fmt.Sprintf("answer to i /w %#x", 0xcf8+i) {
				t.Errorf("batch %d: reply %d: %s (%v)", b, i, raw, err)
			}
		}
	}
	if err := <-f.errs; err != nil {
		t.Fatalf("server: %v", err)
	}
}

// TestBatchMonitorNoOOB: a QEMU that offers no capability is asked for
// none.
func TestBatchMonitorNoOOB(t *testing.T) {
	f := newFakeQMP(t, []string{}, func(*bufio.Reader, net.Conn) error { return nil })
	m, err := dialBatchMonitor(f.path, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	if got := <-f.gotCaps; len(got) != 0 {
		t.Errorf("qmp_capabilities arguments %s, want none", got)
	}
}

// TestBatchMonitorErrorMidBatch: a command QEMU refuses is reported with
// its place and text; the commands after it still answer, and the
// monitor serves the next batch.
func TestBatchMonitorErrorMidBatch(t *testing.T) {
	const n, bad = 6, 3
	f := newFakeQMP(t, []string{"oob"}, func(r *bufio.Reader, c net.Conn) error {
		reqs, err := readAll(r, n)
		if err != nil {
			return err
		}
		for i, q := range reqs {
			body := `"return": "ok"`
			if i == bad {
				body = `"error": {"class": "GenericError", "desc": "no such port"}`
			}
			if err := reply(c, q.ID, body); err != nil {
				return err
			}
		}
		q, err := readRequest(r)
		if err != nil {
			return err
		}
		return reply(c, q.ID, `"return": "again"`)
	})
	m, err := dialBatchMonitor(f.path, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	out, err := m.run(hmpBatch(n))
	var ce *BatchCommandError
	if !errors.As(err, &ce) || ce.Index != bad || ce.Class != "GenericError" || ce.Desc != "no such port" ||
		!strings.Contains(ce.Command, fmt.Sprintf("i /w %#x", 0xcf8+bad)) {
		t.Fatalf("error %v, want command %d's GenericError naming it", err, bad)
	}
	if string(out[bad+1]) != `"ok"` || string(out[n-1]) != `"ok"` || out[bad] != nil {
		t.Errorf("values around the error: %q", out)
	}
	if out, err := m.run(hmpBatch(1)); err != nil || string(out[0]) != `"again"` {
		t.Fatalf("next batch: %q, %v", out, err)
	}
	if err := <-f.errs; err != nil {
		t.Fatalf("server: %v", err)
	}
}

// TestBatchMonitorClosedMidBatch: QEMU gone after two replies: the error
// names the first command left without one, and the monitor refuses
// further batches at once.
func TestBatchMonitorClosedMidBatch(t *testing.T) {
	f := newFakeQMP(t, []string{"oob"}, func(r *bufio.Reader, c net.Conn) error {
		reqs, err := readAll(r, 5)
		if err != nil {
			return err
		}
		for _, q := range reqs[:2] {
			if err := reply(c, q.ID, `"return": "ok"`); err != nil {
				return err
			}
		}
		return nil // closes
	})
	m, err := dialBatchMonitor(f.path, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	_, err = m.run(hmpBatch(5))
	if !errors.Is(err, ErrBatchProtocol) || !strings.Contains(err.Error(), "command 2 ") || !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("error %v, want ErrBatchProtocol at command 2 (EOF)", err)
	}
	if _, err := m.run(hmpBatch(1)); err == nil || !strings.Contains(err.Error(), "unusable") {
		t.Fatalf("a batch after the break: %v, want unusable", err)
	}
	if err := <-f.errs; err != nil {
		t.Fatalf("server: %v", err)
	}
}

// TestBatchMonitorGarbage: answers that are not QMP replies end the batch
// with ErrBatchProtocol at once; a reply cut short ends it at the
// monitor's timeout. None hangs.
func TestBatchMonitorGarbage(t *testing.T) {
	for name, c := range map[string]struct {
		answer  string // after the first reply
		timeout time.Duration
		want    string
	}{
		"not JSON":          {answer: "this is not json\n", timeout: time.Minute, want: "invalid character"},
		"wrong id":          {answer: `{"return": "ok", "id": 999}` + "\n", timeout: time.Minute, want: "has id 999"},
		"no id":             {answer: `{"return": "ok"}` + "\n", timeout: time.Minute, want: "has id none"},
		"string id":         {answer: `{"return": "ok", "id": "x"}` + "\n", timeout: time.Minute, want: "cannot unmarshal"},
		"neither":           {answer: `{"id": ID}` + "\n", timeout: time.Minute, want: "neither return nor error"},
		"cut short":         {answer: `{"return": "o`, timeout: 200 * time.Millisecond, want: "timeout"},
		"greeting repeated": {answer: `{"QMP": {"capabilities": []}}` + "\n", timeout: time.Minute, want: "has id none"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeQMP(t, nil, func(r *bufio.Reader, conn net.Conn) error {
				reqs, err := readAll(r, 3)
				if err != nil {
					return err
				}
				if err := reply(conn, reqs[0].ID, `"return": "ok"`); err != nil {
					return err
				}
				if _, err := conn.Write([]byte(strings.ReplaceAll(c.answer, "ID", string(reqs[1].ID)))); err != nil {
					return err
				}
				_, _ = r.ReadByte() // until the client closes
				return nil
			})
			m, err := dialBatchMonitor(f.path, c.timeout)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = m.run(hmpBatch(3))
			if !errors.Is(err, ErrBatchProtocol) || !strings.Contains(err.Error(), "command 1 ") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want ErrBatchProtocol at command 1 saying %q", err, c.want)
			}
			if d := time.Since(start); d > c.timeout+time.Second {
				t.Errorf("the batch ended after %v, well past its timeout %v", d, c.timeout)
			}
			m.close()
			if err := <-f.errs; err != nil {
				t.Fatalf("server: %v", err)
			}
		})
	}
}
