package orchestrator

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// Timeouts bound every wait of the conversation. Zero fields take the
// defaults below.
type Timeouts struct {
	// Message bounds one control exchange: a hello, Prepare → ready
	// (which includes the destination starting its VM).
	Message time.Duration
	// Data bounds the destination's wait for the vGPU stream's connection
	// after it said ready.
	Data time.Duration
	// Decision bounds the destination's wait for the source's decision
	// after its verdict (the source's VMM switchover runs in between), the
	// source's stop phase (the VM paused, up to the verdict) and the
	// source's wait for the destination's answer to its commit.
	Decision time.Duration
	// Resolve bounds how long a source whose commit went unanswered keeps
	// asking the destination what became of it before it gives up with
	// ErrOutcomeUnknown (the VM stays paused: never two live copies).
	Resolve time.Duration
	// Beat bounds the wait for the guest's first heartbeat after the
	// resume (for the guest-observed downtime; the guest runs meanwhile).
	Beat time.Duration
}

// Default timeouts.
const (
	DefaultMessageTimeout  = 60 * time.Second
	DefaultDataTimeout     = 30 * time.Second
	DefaultDecisionTimeout = 2 * time.Minute
	DefaultResolveTimeout  = 2 * time.Minute
	DefaultBeatTimeout     = 5 * time.Second
)

func (t Timeouts) withDefaults() Timeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&t.Message, DefaultMessageTimeout)
	def(&t.Data, DefaultDataTimeout)
	def(&t.Decision, DefaultDecisionTimeout)
	def(&t.Resolve, DefaultResolveTimeout)
	def(&t.Beat, DefaultBeatTimeout)
	return t
}

// newID returns a random migration or instance identifier.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
