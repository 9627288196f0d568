// Package sdnotify tells systemd how a Type=notify service is doing: a
// datagram of newline-separated KEY=VALUE lines to the socket named by
// $NOTIFY_SOCKET (sd_notify(3), "Notes": a path, or an abstract socket
// when it starts with '@'). Without $NOTIFY_SOCKET (not started by
// systemd, tests) every call does nothing.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// EnvSocket is the variable systemd sets for a Type=notify service
// (sd_notify(3)).
const EnvSocket = "NOTIFY_SOCKET"

// States, from sd_notify(3) "Well-known assignments".
const (
	Ready     = "READY=1"     // start-up is finished (or a reload is)
	Reloading = "RELOADING=1" // a reload began; READY=1 follows when it ends
	Stopping  = "STOPPING=1"  // shutdown began
)

// writeTimeout bounds one notification: systemd reads its socket at once,
// and a daemon must never hang on a supervisor that went away.
const writeTimeout = time.Second

// Notify sends state (lines such as Ready) to $NOTIFY_SOCKET. It reports
// whether a socket was named: false and nil without one.
func Notify(state string) (bool, error) {
	path := os.Getenv(EnvSocket)
	if path == "" {
		return false, nil
	}
	// Go's net package maps a leading '@' to Linux's abstract namespace,
	// the same convention sd_notify uses.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return true, fmt.Errorf("sdnotify: %s %s: %w", EnvSocket, path, err)
	}
	defer c.Close()
	if err := c.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return true, fmt.Errorf("sdnotify: %w", err)
	}
	if _, err := c.Write([]byte(state)); err != nil {
		return true, fmt.Errorf("sdnotify: sending %q: %w", state, err)
	}
	return true, nil
}

// ReloadingNow is Reloading with the MONOTONIC_USEC systemd wants beside
// it (sd_notify(3): "RELOADING=1 ... MONOTONIC_USEC=" with
// CLOCK_MONOTONIC in microseconds; needed under Type=notify-reload).
func ReloadingNow() string {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for CLOCK_MONOTONIC
	return fmt.Sprintf("%s\nMONOTONIC_USEC=%d", Reloading, ts.Sec*1e6+ts.Nsec/1e3)
}
