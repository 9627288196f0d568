package orchestrator

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

// The conversation between two gmigd (docs/migration-protocol.md): every
// connection opens with a hello; control messages are length-prefixed JSON
// (a 4-byte big-endian length, then the JSON); a data connection carries
// the precopy stream after its hello.

// ProtocolVersion is the version of this conversation; a peer refuses any
// other. Version 2: Prepare carries the vGPU's whole vgpu.Spec.
const ProtocolVersion = 2

// maxMessage bounds one control message (a VM spec is a command line).
const maxMessage = 1 << 20

// Connection kinds, the hello's Kind.
const (
	kindMigrate = "migrate" // the control connection of one migration
	kindData    = "data"    // the vGPU stream of one migration
	kindQuery   = "query"   // asks a migration's outcome
	kindCheck   = "check"   // a dry run: would a migration land? (check.go)
	kindStream  = "stream"  // an extra stream of one migration's stop phase
)

type hello struct {
	Version int    `json:"version"`
	Kind    string `json:"kind"`
	ID      string `json:"id"`
	// Index numbers a kindStream connection: 1 … ready.Streams−1 (the
	// data connection is stream 0).
	Index int `json:"index,omitempty"`
}

// Prepare is what a source asks of the destination: a vGPU like its own,
// and a VM like its own, paused, waiting for the migration.
type Prepare struct {
	ID string `json:"id"`
	// Name is the vGPU's name at the destination; VGPU is what it is
	// (size, GTT, back end, guest modules, the CAPS its guest saw), which
	// the destination provides exactly or refuses.
	Name string    `json:"name"`
	VGPU vgpu.Spec `json:"vgpu"`
	// VMKind names the VMM ("qemu", "sim"); VM is its own description of
	// the VM (for QEMU its configuration), opaque to the orchestrator.
	VMKind   string           `json:"vm_kind"`
	VM       json.RawMessage  `json:"vm,omitempty"`
	Strategy precopy.Strategy `json:"strategy"`
}

type ready struct {
	Error    string `json:"error,omitempty"`
	Incoming string `json:"incoming,omitempty"`
	Instance string `json:"instance"` // the destination gmigd's run, for outcome queries
	// Streams is the most streams the destination takes for the vGPU's
	// stop phase; absent (a destination before them): 1.
	Streams int `json:"streams,omitempty"`
}

// gaveUp is the destination's word, after ready and before the source's
// decision, that it has given up on the migration and why; it discards
// what it built right after.
type gaveUp struct {
	GaveUp string `json:"gave_up"`
}

// decision is the source's last word: commit, or abort with a reason.
type decision struct {
	Commit bool   `json:"commit"`
	Reason string `json:"reason,omitempty"`
}

// DestTimes are the destination's timestamps at the end of a migration, on
// its own clock.
type DestTimes struct {
	CommitReceived time.Time `json:"commit_received"`
	// Loaded and FrontEnd: the VMM had loaded the VM, the front end was
	// restored (its device-written guest RAM written back first) — with an
	// early attach (EarlyAttacher), the moment the commit found each done,
	// never before CommitReceived: their parts on the downtime's path.
	Loaded       time.Time `json:"loaded"`
	FrontEnd     time.Time `json:"front_end"`
	Recorded     time.Time `json:"recorded"`   // the commit is on disk (written beside the load)
	EngineRun    time.Time `json:"engine_run"` // the vGPU's engine is told to run
	Resumed      time.Time `json:"resumed"`    // the VM runs (the VMM's own timestamp)
	ConfigWrites int       `json:"config_writes"`
	// An early attach's own times, from its start right after the
	// verdict; absent (zero) when the attach ran after the commit, or from
	// a destination before early attaches (which a source reads as that).
	AttachStart  time.Time `json:"attach_start,omitzero"`
	LoadDone     time.Time `json:"load_done,omitzero"`
	FrontEndDone time.Time `json:"front_end_done,omitzero"`
}

type committed struct {
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
	Times DestTimes `json:"times"`
}

// beat is the first guest heartbeat the destination saw after the resume.
type beat struct {
	OK    bool      `json:"ok"`
	Value uint64    `json:"value,omitempty"`
	At    time.Time `json:"at,omitempty"`
}

// Outcomes of a migration at the destination.
const (
	outcomePending   = "pending" // still undecided: ask again
	outcomeResumed   = "resumed" // the destination runs the VM
	outcomeAborted   = "aborted" // the destination discarded it and never ran it
	outcomeUnknownID = "unknown" // never heard of it (a restarted gmigd: its VMs died with it)
)

type outcome struct {
	State    string `json:"state"`
	Instance string `json:"instance"`
}

var errMessageSize = errors.New("orchestrator: message too large")

// writeMsg sends v as one length-prefixed JSON message.
func writeMsg(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("orchestrator: encoding %T: %w", v, err)
	}
	if len(b) > maxMessage {
		return fmt.Errorf("%w: %d bytes", errMessageSize, len(b))
	}
	buf := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	if _, err := w.Write(append(buf, b...)); err != nil {
		return fmt.Errorf("orchestrator: sending %T: %w", v, err)
	}
	return nil
}

// readMsg reads one length-prefixed JSON message into v. It reads exactly
// the message, so a stream that follows it on the same connection is left
// untouched.
func readMsg(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return fmt.Errorf("orchestrator: reading %T: %w", v, err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxMessage {
		return fmt.Errorf("%w: %d bytes announced", errMessageSize, size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("orchestrator: reading %T: %w", v, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("orchestrator: malformed %T: %w", v, err)
	}
	return nil
}
