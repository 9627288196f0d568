package vfio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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

// ServerConfig configures a Server.
type ServerConfig struct {
	Device      Device
	DMA         *DMATable // nil: the server makes one
	IRQs        *IRQTable // nil: the server makes one
	Log         zerolog.Logger
	MaxDataXfer uint32 // 0: DefaultMaxDataXfer
}

// Server hosts one Device for vfio-user clients, one client at a time.
type Server struct {
	dev     Device
	dma     *DMATable
	irqs    *IRQTable
	log     zerolog.Logger
	maxXfer uint32
	mig     *migration // nil: the device does not migrate through the protocol
}

// NewServer returns a server for cfg.Device.
func NewServer(cfg ServerConfig) *Server {
	s := &Server{dev: cfg.Device, dma: cfg.DMA, irqs: cfg.IRQs, log: cfg.Log, maxXfer: cfg.MaxDataXfer}
	if s.dma == nil {
		s.dma = NewDMATable()
	}
	if s.irqs == nil {
		s.irqs = NewIRQTable()
	}
	if s.maxXfer == 0 {
		s.maxXfer = DefaultMaxDataXfer
	}
	s.mig = newMigration(cfg.Device)
	return s
}

// DMA returns the server's DMA table.
func (s *Server) DMA() *DMATable { return s.dma }

// IRQs returns the server's IRQ table.
func (s *Server) IRQs() *IRQTable { return s.irqs }

// Serve accepts clients on l one at a time and serves each until it
// disconnects. It returns ctx.Err() once ctx is cancelled (it then sets a
// past deadline on l to stop Accept), nil when l is closed, or an accept
// error.
func (s *Server) Serve(ctx context.Context, l *net.UnixListener) error {
	stop := context.AfterFunc(ctx, func() { l.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("vfio: accepting client: %w", err)
		}
		if err := s.ServeConn(ctx, c); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("vfio-user connection failed")
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// ServeConn serves one client on c until it disconnects or ctx is
// cancelled, then closes c, unmaps the client's DMA and closes its eventfds;
// the device itself is left as it is, for the next client. It returns nil
// when the client went away and ctx.Err() when cancelled.
func (s *Server) ServeConn(ctx context.Context, c *net.UnixConn) error {
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	defer c.Close()
	log := s.log.With().Int32("peer_pid", peerPID(c)).Logger()
	log.Info().Msg("vfio-user client connected")
	sess := &session{srv: s, t: newTransport(c), log: log, maxXfer: s.maxXfer}
	err := sess.run()
	s.dma.UnmapAll()
	s.irqs.Close()
	if ctx.Err() != nil {
		log.Info().Msg("vfio-user client disconnected: server stopping")
		return ctx.Err()
	}
	if isDisconnect(err) {
		log.Info().Msg("vfio-user client disconnected")
		return nil
	}
	log.Info().Err(err).Msg("vfio-user client disconnected on error")
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
	maxSize := s.srv.maxXfer + HeaderSize + maxMsgSlack
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
