package sdnotify

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestNotify: without $NOTIFY_SOCKET nothing is sent and nothing fails;
// with one (a path, or an abstract name with '@'), each state arrives as
// one datagram; a socket nobody listens on is an error.
func TestNotify(t *testing.T) {
	t.Setenv(EnvSocket, "")
	if sent, err := Notify(Ready); sent || err != nil {
		t.Fatalf("without a socket: sent %v, %v", sent, err)
	}
	for _, name := range []string{filepath.Join(t.TempDir(), "notify"), "@gmig-sdnotify-test-" + filepath.Base(t.TempDir())} {
		l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(EnvSocket, name)
		for _, st := range []string{Ready, ReloadingNow(), Stopping} {
			if sent, err := Notify(st); !sent || err != nil {
				t.Fatalf("%s: sent %v, %v", name, sent, err)
			}
			buf := make([]byte, 256)
			n, err := l.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			if string(buf[:n]) != st {
				t.Fatalf("%s: got %q, want %q", name, buf[:n], st)
			}
		}
		l.Close()
	}
	if !strings.HasPrefix(ReloadingNow(), Reloading+"\nMONOTONIC_USEC=") {
		t.Fatalf("ReloadingNow: %q", ReloadingNow())
	}
	t.Setenv(EnvSocket, filepath.Join(t.TempDir(), "nobody"))
	if sent, err := Notify(Ready); !sent || err == nil {
		t.Fatalf("to a missing socket: sent %v, %v", sent, err)
	}
}
