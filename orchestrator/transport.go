package orchestrator

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Transport connects two gmigd for migrations. TCP is the plain one (the
// default of a nil Transport, and gmigd's with -insecure-migrations);
// package internal/mtls is mutual TLS, gmigd's default: its Dial and Listen
// return only connections whose peer is authenticated, before anything is
// read from them.
type Transport interface {
	Dial(ctx context.Context, addr string) (net.Conn, error)
	Listen(addr string) (net.Listener, error)
}

// TCP is the plain TCP transport.
type TCP struct {
	// DialTimeout bounds one connection attempt (default 10 s).
	DialTimeout time.Duration
}

// Dial connects to addr (host:port).
func (t TCP) Dial(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: t.DialTimeout}
	if d.Timeout == 0 {
		d.Timeout = 10 * time.Second
	}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: connecting to %s: %w", addr, err)
	}
	return c, nil
}

// Listen listens on addr (host:port; port 0 picks one).
func (TCP) Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("orchestrator: listening on %s: %w", addr, err)
	}
	return l, nil
}
