package qemu

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// qemuBanner is what QEMU 11.1.3 sends a new connection to a readline
// monitor (seen on a real one).
const qemuBanner = "QEMU 11.1.3 monitor - type 'help' for more information\r\n(qemu) "

// qemuEcho is readline's echo of a line typed a byte at a time, as QEMU
// 11.1.3 sends it: after each byte the cursor goes back over what was
// shown (ESC [ D each), the line so far is redrawn and the rest cleared
// (ESC [ K); the line's end is "\r\n".
func qemuEcho(line string) string {
	var b strings.Builder
	for k := 1; k <= len(line); k++ {
		b.WriteString(strings.Repeat("\x1b[D", k-1))
		b.WriteString(line[:k])
		b.WriteString("\x1b[K")
	}
	b.WriteString("\r\n")
	return b.String()
}

// fakeHMP is the server end of a net.Pipe to an hmpMonitor: unbuffered,
// so what it writes a byte at a time reaches the client in as many reads.
type fakeHMP struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

// newFakeHMP returns a monitor client whose banner the fake server sent a
// byte at a time (the prompt split over reads), and the server.
func newFakeHMP(t *testing.T, timeout time.Duration) (*hmpMonitor, *fakeHMP) {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	f := &fakeHMP{t: t, conn: server, r: bufio.NewReader(server)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.send(qemuBanner, 1)
	}()
	m, err := newHMPMonitor(client, timeout)
	if err != nil {
		t.Fatal(err)
	}
	<-done
	return m, f
}

// send writes s in pieces of n bytes; a closed client ends it quietly.
func (f *fakeHMP) send(s string, n int) {
	for len(s) > 0 {
		k := min(n, len(s))
		if _, err := f.conn.Write([]byte(s[:k])); err != nil {
			return
		}
		s = s[k:]
	}
}

// lines reads n lines the client sent.
func (f *fakeHMP) lines(n int) []string {
	var out []string
	for range n {
		l, err := f.r.ReadString('\n')
		if err != nil {
			f.t.Errorf("fake HMP server: reading line %d: %v", len(out), err)
			return out
		}
		out = append(out, strings.TrimSuffix(l, "\n"))
	}
	return out
}

// answer sends QEMU's echo of line, its output and the next prompt, in
// pieces of n bytes.
func (f *fakeHMP) answer(line, output string, n int) {
	f.send(qemuEcho(line)+output+"(qemu) ", n)
}

// TestHMPMonitorBatch: a batch's lines all reach the server before it
// answers any (they are pipelined); echoes, answers and prompts arriving
// a byte at a time, or in pieces of 7 bytes, come back as each line's
// output with "\n" line ends; the monitor then takes the next batch.
func TestHMPMonitorBatch(t *testing.T) {
	for _, piece := range []int{1, 7, 1 << 20} {
		m, f := newFakeHMP(t, 5*time.Second)
		lines := []string{"i /w 0xcf8", "o /w 0xcf8 0x80001010", "o /b 0xcfd 0x3", "i /w 0xcfc"}
		answers := []string{"portl[0x0cf8] = 0x80000800\r\n", "", "", "portl[0x0cfc] = 0x00c0c0c0\r\nsecond line\r\n"}
		go func() {
			got := f.lines(len(lines))
			for i, l := range got {
				if l != lines[i] {
					t.Errorf("piece %d: server read line %d %q, want %q", piece, i, l, lines[i])
				}
			}
			for i, l := range lines {
				f.answer(l, answers[i], piece)
			}
			if l := f.lines(1); len(l) == 1 {
				f.answer(l[0], "", piece)
			}
		}()
		outs, err := m.run(lines)
		if err != nil {
			t.Fatalf("piece %d: %v", piece, err)
		}
		want := []string{"portl[0x0cf8] = 0x80000800\n", "", "", "portl[0x0cfc] = 0x00c0c0c0\nsecond line\n"}
		if strings.Join(outs, "|") != strings.Join(want, "|") {
			t.Errorf("piece %d: outputs %q, want %q", piece, outs, want)
		}
		if outs, err := m.run([]string{"o /w 0xcf8 0x0"}); err != nil || outs[0] != "" {
			t.Errorf("piece %d: the next batch: %q, %v", piece, outs, err)
		}
		m.close()
	}
}

// TestHMPMonitorErrorTextMidBatch: HMP answers a refused command with
// text and goes on with the next line; the restore's port accesses name
// the one whose answer is not what it should be (an "o" that printed
// something), and the monitor stays in step for the next batch.
func TestHMPMonitorErrorTextMidBatch(t *testing.T) {
	m, f := newFakeHMP(t, 5*time.Second)
	ops := []portAccess{
		{read: true, size: "w", port: 0xcf8, what: "saving CONFIG_ADDRESS"},
		{size: "w", port: 0xcf8, value: 0x80001010, what: "replaying config write 0x10/4"},
		{size: "w", port: 0xcfc, value: 0xfebf0000, what: "replaying config write 0x10/4"},
	}
	go func() {
		f.lines(len(ops))
		f.answer(ops[0].hmp(), "portl[0x0cf8] = 0x80000000\r\n", 3)
		f.answer(ops[1].hmp(), "unexpected end of expression\r\nTry \"help o\" for more information\r\n", 3)
		f.answer(ops[2].hmp(), "", 3)
		if l := f.lines(1); len(l) == 1 {
			f.answer(l[0], "portl[0x0cf8] = 0x80000000\r\n", 3)
		}
	}()
	_, err := portIO{hmp: m}.run(ops)
	if err == nil || !strings.Contains(err.Error(), "replaying config write 0x10/4") ||
		!strings.Contains(err.Error(), `"o /w 0xcf8 0x80001010"`) || !strings.Contains(err.Error(), "unexpected end of expression") {
		t.Fatalf("error %v, want one naming the access, its line and HMP's text", err)
	}
	read, err := portIO{hmp: m}.run(ops[:1])
	if err != nil || len(read) != 1 || read[0] != 0x80000000 {
		t.Fatalf("the next batch: %#x, %v", read, err)
	}
}

// TestHMPMonitorClosedMidBatch: a connection closed after the first
// answer fails the batch naming the second line, and the monitor refuses
// later batches at once.
func TestHMPMonitorClosedMidBatch(t *testing.T) {
	m, f := newFakeHMP(t, 5*time.Second)
	lines := []string{"i /w 0xcf8", "o /w 0xcf8 0x80001010", "o /w 0xcfc 0x3"}
	go func() {
		f.lines(len(lines))
		f.answer(lines[0], "portl[0x0cf8] = 0x80000000\r\n", 5)
		f.send(qemuEcho(lines[1])[:20], 5) // the echo cut short
		f.conn.Close()
	}()
	outs, err := m.run(lines)
	if !errors.Is(err, io.EOF) || !strings.Contains(err.Error(), `line 1 "o /w 0xcf8 0x80001010"`) {
		t.Fatalf("error %v, want EOF naming line 1", err)
	}
	if outs[0] != "portl[0x0cf8] = 0x80000000\n" {
		t.Errorf("the first line's output %q", outs[0])
	}
	if _, err := m.run(lines[:1]); err == nil || !strings.Contains(err.Error(), "unusable") {
		t.Fatalf("a batch after the break: %v, want the monitor unusable", err)
	}
}

// TestHMPMonitorGarbage: a stream that is not a readline monitor's fails
// the batch without hanging: no prompt ever (bounded by hmpMaxAnswer),
// an echo of another line, a prompt before the line's end, silence
// (bounded by the timeout); a banner without a prompt fails the dial.
func TestHMPMonitorGarbage(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply func(f *fakeHMP)
		want  error
	}{
		{"no prompt", func(f *fakeHMP) { f.send(strings.Repeat("\x00garbage\xff", 10_000), 4096) }, ErrHMPProtocol},
		{"another line's echo", func(f *fakeHMP) { f.answer("o /w 0xcf8 0x80001011", "", 64) }, ErrHMPProtocol},
		{"prompt before the line's end", func(f *fakeHMP) { f.send("i /w(qemu) ", 64) }, ErrHMPProtocol},
		{"silence", func(f *fakeHMP) {}, os.ErrDeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, f := newFakeHMP(t, 300*time.Millisecond)
			go func() {
				f.lines(1)
				c.reply(f)
			}()
			_, err := m.run([]string{"o /w 0xcf8 0x80001010"})
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), `line 0 "o /w 0xcf8 0x80001010"`) {
				t.Fatalf("error %v, want %v naming line 0", err, c.want)
			}
		})
	}

	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	go func() { _, _ = server.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n")) }()
	if _, err := newHMPMonitor(client, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "banner") {
		t.Fatalf("a banner without a prompt: %v", err)
	}
}

// TestHMPMonitorRefusesControlCharacters: a line readline would take as
// two (or edit) is refused before anything is sent (a write on the pipe
// would wait for the server, which reads nothing, past the timeout).
func TestHMPMonitorRefusesControlCharacters(t *testing.T) {
	m, _ := newFakeHMP(t, 5*time.Second)
	for _, l := range []string{"", "o /w 0xcf8 0x1\ni /w 0xcf8", "i /w 0xcf8\r", "i \x1b[D/w"} {
		if _, err := m.run([]string{"i /w 0xcfc", l}); err == nil || !strings.Contains(err.Error(), "control character") {
			t.Errorf("line %q: %v, want it refused", l, err)
		}
	}
}

// TestTerminalLine: the echo as a terminal shows it.
func TestTerminalLine(t *testing.T) {
	for _, c := range []struct{ echo, want string }{
		{qemuEcho("o /w 0xcf8 0x80001010"), "o /w 0xcf8 0x80001010\r\n"},
		{"i /x\x1b[K\x1b[Dw\x1b[K 0xcf8", "i /w 0xcf8"},      // a redraw over a typo
		{"i /w 0xcf8 junk\r\x1b[Ki /w 0xcf8", "i /w 0xcf8"},  // a carriage return and a clear
		{"i /w 0xcf\b\bcf8", "i /w 0xcf8"},                   // backspaces
		{"i /w\x1b[D\x1b[D\x1b[C\x1b[C 0xcf8", "i /w 0xcf8"}, // moves left and right
		{"\x1b[1;32mi /w 0xcf8\x1b[0m\a", "i /w 0xcf8"},      // colours and a bell show nothing
		{"i /w 0xcf8\x1b[", "i /w 0xcf8"},                    // a sequence cut short
		{"\x1b[D\x1b[D\x1b[Ki /w 0xcf8", "i /w 0xcf8"},       // the cursor stops at the start
	} {
		if got := terminalLine(strings.TrimSuffix(c.echo, "\r\n")); got != strings.TrimSuffix(c.want, "\r\n") {
			t.Errorf("terminalLine(%q) = %q, want %q", c.echo, got, c.want)
		}
	}
}

// TestHMPMonitorRealQEMU runs lines on a real QEMU's readline monitor
// (TCG, paused): reads and writes, a refused line's text mid-batch, an
// access without a size taking the last one given (so portAccess always
// names it), a second connection after the first left a line unfinished
// (QEMU drops it). It needs the provisioned QEMU root (GMIG_CACHE).
func TestHMPMonitorRealQEMU(t *testing.T) {
	root := needRoot(t)
	run := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	vm, err := Start(t.Context(), Config{Spec: Spec{Accel: "tcg", MemoryMB: 64}, Root: root, RunDir: run, Serial: out, Incoming: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(vm.Kill)
	path := filepath.Join(run, HMPSocket)
	m, err := dialHMPMonitor(path, hmpTimeout)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := m.run([]string{"o /w 0xcf8 0x80001010", "o /w 0xcf8", "bogus", "i /w 0xcf8", "o /b 0x80 0x1", "i 0xcf8"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"", "unexpected end of expression\nTry \"help o\" for more information\n",
		"unknown command: 'bogus'\n", "portl[0x0cf8] = 0x80001010\n", "", "portb[0x0cf8] = 0x10\n"}
	if strings.Join(outs, "|") != strings.Join(want, "|") {
		t.Errorf("outputs %q, want %q", outs, want)
	}
	// A line left unfinished, then a new connection: QEMU drops the line.
	if _, err := m.conn.Write([]byte("o /w 0xcf8 0x8000")); err != nil {
		t.Fatal(err)
	}
	for !strings.HasSuffix(terminalLine(string(m.pending)), "o /w 0xcf8 0x8000") { // QEMU has read it all
		var b [4096]byte
		n, err := m.conn.Read(b[:])
		if err != nil {
			t.Fatalf("reading the unfinished line's echo: %v (%q)", err, m.pending)
		}
		m.pending = append(m.pending, b[:n]...)
	}
	m.close()
	m, err = dialHMPMonitor(path, hmpTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	if outs, err := m.run([]string{"i /w 0xcf8"}); err != nil || outs[0] != "portl[0x0cf8] = 0x80001010\n" {
		t.Fatalf("after an unfinished line: %q, %v", outs, err)
	}
}
