package vfio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// DefaultMaxDataXfer is the largest REGION_READ/WRITE count a server accepts
// unless configured otherwise (the specification's default
// max_data_xfer_size, 1 MiB).
const DefaultMaxDataXfer = 1 << 20

// maxMsgSlack is what a message may carry beyond MaxDataXfer bytes of data:
// headers, SET_IRQS bools, the VERSION JSON, REGION_WRITE_MULTI entries.
const maxMsgSlack = 4096

// DefaultMessageTimeout bounds one message on a connection once it has
// begun: from its first byte, the whole message (header, payload,
// descriptors) must arrive within it, and the client must take a whole
// reply within it; otherwise the server drops the connection. Silence
// between messages is never timed. The order of magnitude is QEMU's own:
// its vfio-user-pci client waits x-msg-timeout, 5000 ms by default
// (hw/vfio-user/pci.c, DEFINE_PROP_UINT32("x-msg-timeout", ..., 5000)), for
// each reply from a server, so a peer that takes longer than that over a
// local socket has stalled, by QEMU's standard as well as ours.
const DefaultMessageTimeout = 5 * time.Second

// DefaultBusyWait is how long a client that connects while another is
// served waits for that one to leave before it is refused with EBUSY (see
// Serve). It covers a client that reconnects right after its predecessor
// closed (QEMU restarted, the guest simulator after QEMU): the server sees
// the old connection end and cleans up well within it, even on a loaded
// machine. It is less than half of QEMU's x-msg-timeout (5000 ms, see
// DefaultMessageTimeout), the time QEMU waits for its VERSION reply, so a
// refused QEMU hears EBUSY rather than timing out, and a QEMU served after
// waiting still has most of its time left.
const DefaultBusyWait = 2 * time.Second

// ServerConfig configures a Server.
type ServerConfig struct {
	Device      Device
	DMA         *DMATable // nil: the server makes one
	IRQs        *IRQTable // nil: the server makes one
	Log         zerolog.Logger
	MaxDataXfer uint32 // 0: DefaultMaxDataXfer
	// MessageTimeout bounds one message once begun, received or sent;
	// 0: DefaultMessageTimeout.
	MessageTimeout time.Duration
	// BusyWait is how long a second client waits for the served one to
	// leave before it is refused; 0: DefaultBusyWait.
	BusyWait time.Duration
}

// Server hosts one Device for vfio-user clients, one client at a time.
type Server struct {
	dev        Device
	dma        *DMATable
	irqs       *IRQTable
	log        zerolog.Logger
	maxXfer    uint32
	msgTimeout time.Duration
	busyWait   time.Duration
	mig        *migration // nil: the device does not migrate through the protocol

	// slot holds a token while a client is served (see ServeConn); the
	// served client's process id is in servedPID, for log lines.
	slot      chan struct{}
	servedPID atomic.Int32
}

// NewServer returns a server for cfg.Device.
func NewServer(cfg ServerConfig) *Server {
	s := &Server{dev: cfg.Device, dma: cfg.DMA, irqs: cfg.IRQs, log: cfg.Log, maxXfer: cfg.MaxDataXfer,
		msgTimeout: cfg.MessageTimeout, busyWait: cfg.BusyWait, slot: make(chan struct{}, 1)}
	if s.dma == nil {
		s.dma = NewDMATable()
	}
	if s.irqs == nil {
		s.irqs = NewIRQTable()
	}
	if s.maxXfer == 0 {
		s.maxXfer = DefaultMaxDataXfer
	}
	if s.msgTimeout <= 0 {
		s.msgTimeout = DefaultMessageTimeout
	}
	if s.busyWait <= 0 {
		s.busyWait = DefaultBusyWait
	}
	s.mig = newMigration(cfg.Device)
	return s
}

// DMA returns the server's DMA table.
func (s *Server) DMA() *DMATable { return s.dma }

// IRQs returns the server's IRQ table.
func (s *Server) IRQs() *IRQTable { return s.irqs }

// maxMsgSize is the largest message the server reads whole.
func (s *Server) maxMsgSize() uint32 { return s.maxXfer + HeaderSize + maxMsgSlack }

// ServeConn serves one client on c until it disconnects, stalls in a
// message past the message timeout, or ctx is cancelled, then closes c,
// unmaps the client's DMA and closes its eventfds; the device itself is
// left as it is, for the next client. While another client is served (by
// Serve or ServeConn) it first waits, without bound, for that one to leave;
// Serve bounds that wait. It logs one line when the client goes, and
// returns nil when the client went away, ctx.Err() when cancelled, and
// otherwise the error that ended the connection (wrapping ErrMessageTimeout
// for a stall).
func (s *Server) ServeConn(ctx context.Context, c *net.UnixConn) error {
	select {
	case s.slot <- struct{}{}:
	case <-ctx.Done():
		c.Close()
		return ctx.Err()
	}
	return s.serveHeld(ctx, c)
}

// serveHeld is ServeConn for a caller that holds the slot; it gives the
// slot back once the client's DMA and eventfds are gone.
func (s *Server) serveHeld(ctx context.Context, c *net.UnixConn) error {
	defer func() { <-s.slot }()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	defer c.Close()
	pid := peerPID(c)
	s.servedPID.Store(pid)
	log := s.log.With().Int32("peer_pid", pid).Logger()
	log.Info().Msg("vfio-user client connected")
	t := newTransport(c)
	t.msgTimeout = s.msgTimeout
	sess := &session{srv: s, t: t, log: log, maxXfer: s.maxXfer}
	err := sess.run()
	s.dma.UnmapAll()
	s.irqs.Close()
	if dl, ok := s.dev.(DMALogger); ok && dl.DMALog().stop() {
		log.Info().Msg("dma logging stopped: its client left")
	}
	var te *timeoutError
	switch {
	case ctx.Err() != nil:
		log.Info().Msg("vfio-user client disconnected: server stopping")
		return ctx.Err()
	case isDisconnect(err):
		log.Info().Msg("vfio-user client disconnected")
		return nil
	case errors.As(err, &te):
		ev := log.Warn().Err(err).Str("op", te.op).Dur("timeout", te.limit).Int("bytes_done", te.done)
		if te.hdrKnown {
			ev = ev.Str("cmd", CommandName(te.hdr.Command)).Uint16("id", te.hdr.ID).Uint32("size", te.hdr.Size)
		}
		ev.Msg("vfio-user client dropped: message not complete within the message timeout")
	default:
		log.Warn().Err(err).Msg("vfio-user client disconnected on error")
	}
	return fmt.Errorf("vfio: serving client: %w", err)
}

// peerPID returns the client's process id (SO_PEERCRED), or -1.
func peerPID(c *net.UnixConn) int32 {
	pid := int32(-1)
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
				pid = cred.Pid
			}
		})
	}
	return pid
}

func isDisconnect(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// session is the state of one connection, owned by its request loop.
type session struct {
	srv        *Server
	t          *transport
	log        zerolog.Logger
	negotiated bool
	maxXfer    uint32 // negotiated max_data_xfer_size
}

// run is the request loop: read a message, dispatch it, reply. It returns
// only when the connection fails or closes.
func (s *session) run() error {
	maxSize := s.srv.maxMsgSize()
	for {
		m, err := s.t.recv(maxSize)
		var fe *frameError
		switch {
		case errors.As(err, &fe):
			err = s.replyError(m.hdr, fe)
		case err != nil:
			return err
		default:
			err = s.dispatch(m)
			m.closeFDs()
		}
		if err != nil {
			return err
		}
	}
}

// dispatch handles one well-framed message. Only a failure to send a reply
// is returned; everything else becomes an error reply.
func (s *session) dispatch(m *message) error {
	h := m.hdr
	if h.Type() != FlagTypeCommand {
		return s.replyError(h, fmt.Errorf("%w: message type %d where a command is expected", ErrInvalid, h.Type()))
	}
	cmd := lookupCommand(h.Command)
	var err error
	switch {
	case cmd.handle == nil:
		err = fmt.Errorf("%w: command %s", ErrUnsupported, CommandName(h.Command))
	case !s.negotiated && h.Command != CmdVersion:
		err = fmt.Errorf("%w: %s before VERSION", ErrNotNegotiated, CommandName(h.Command))
	case len(m.fds) > cmd.maxFDs:
		err = fmt.Errorf("%w: %s with %d descriptors, at most %d", ErrInvalid, CommandName(h.Command), len(m.fds), cmd.maxFDs)
	}
	if err != nil {
		return s.replyError(h, err)
	}
	frame, fds, err := cmd.handle(s, m)
	if err != nil {
		return s.replyError(h, err)
	}
	if h.Flags&FlagNoReply != 0 {
		return nil
	}
	if frame == nil {
		frame = newFrame(0)
	}
	return s.t.send(Header{ID: h.ID, Command: h.Command, Flags: FlagTypeReply}, frame, fds)
}

// replyError sends an error reply for the message with header h, or for a
// command with No_reply set only logs it.
func (s *session) replyError(h Header, err error) error {
	errno := errnoOf(err)
	if h.Type() == FlagTypeCommand && h.Flags&FlagNoReply != 0 {
		s.log.Warn().Err(err).Str("cmd", CommandName(h.Command)).Uint16("id", h.ID).
			Msg("vfio-user request without reply failed")
		return nil
	}
	s.log.Debug().Err(err).Str("cmd", CommandName(h.Command)).Uint16("id", h.ID).
		Str("errno", unix.ErrnoName(errno)).Msg("vfio-user error reply")
	return s.t.send(Header{ID: h.ID, Command: h.Command, Flags: FlagTypeReply | FlagError, Error: uint32(errno)},
		newFrame(0), nil)
}
