package precopy

import (
	"bytes"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vgpu"
)

// What this package puts in the stream's blob sections (doc.go, "The
// conversation"; docs/migration-stream.md §8 and §10).

// Meta phases.
const (
	phaseBegin   = "begin"   // first section: what is coming
	phaseStop    = "stop"    // the VM stopped; pages from here on are the stop phase
	phaseSummary = "summary" // just before End: the source's measurements
	phaseVerdict = "verdict" // the destination's answer, in a stream of its own
)

// stateEncoding names how DeviceState is encoded; a receiver refuses any
// other. A changed encoding gets a new name.
const stateEncoding = "gob/vgpu.State"

// Limits on what this package reads.
const (
	maxStateBlob   = 16 << 20 // a gob'd vgpu.State is well under 1 MiB (65536 GTT entries)
	maxVerdictBlob = 64 << 10
)

// meta is the JSON payload of every Meta section this package sends; which
// fields are set depends on Phase.
type meta struct {
	Phase string `json:"phase"`

	// begin
	Name          string     `json:"name,omitempty"`
	VGPU          *vgpu.Spec `json:"vgpu,omitempty"` // the source's vGPU, which the destination's must be
	Strategy      Strategy   `json:"strategy,omitempty"`
	StateEncoding string     `json:"state_encoding,omitempty"`
	// DeviceAddrBase is where the source's device-local memory lies on its
	// GPU (a cuda vGPU with local memory; 0 otherwise), the address the
	// guest holds: the destination places its own there before the pages
	// come, rather than at the restore, in the downtime.
	DeviceAddrBase uint64 `json:"device_addr_base,omitempty"`

	// stop: with the stop phase spread over several streams, how many
	// (the main one included) and the token their ShardHeaders carry
	// (shards.go).
	Streams    int    `json:"streams,omitempty"`
	ShardToken uint64 `json:"shard_token,omitempty"`

	// summary: the source's report so far; verdict: the destination's.
	Report *Report `json:"report,omitempty"`

	// verdict
	OK    bool   `json:"ok,omitempty"`
	Error string `json:"error,omitempty"`
}

func writeMeta(w *stream.Writer, m meta) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("precopy: encoding %s meta: %w", m.Phase, err)
	}
	return w.WriteBlob(stream.Meta, b)
}

func parseMeta(b []byte) (meta, error) {
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		return meta{}, fmt.Errorf("precopy: malformed Meta section: %w", err)
	}
	return m, nil
}

// writeVerdict sends the destination's verdict on w: a stream of its own,
// header, one Meta section, End.
func writeVerdict(w io.Writer, m meta) error {
	m.Phase = phaseVerdict
	sw, err := stream.NewWriter(w)
	if err == nil {
		err = writeMeta(sw, m)
	}
	if err == nil {
		err = sw.Close()
	}
	if err != nil {
		return fmt.Errorf("precopy: sending verdict: %w", err)
	}
	return nil
}

// readVerdict reads the destination's verdict from r.
func readVerdict(r io.Reader) (meta, error) {
	sr, err := stream.NewReader(r, stream.Limits{MaxBlob: maxVerdictBlob})
	if err != nil {
		return meta{}, fmt.Errorf("precopy: reading verdict: %w", err)
	}
	var m meta
	seen := false
	for {
		sec, err := sr.Next(nil)
		switch {
		case err == io.EOF && seen:
			return m, nil
		case err == io.EOF:
			return meta{}, errors.New("precopy: verdict without a Meta section")
		case err != nil:
			return meta{}, fmt.Errorf("precopy: reading verdict: %w", err)
		case sec.Type != stream.Meta || seen:
			return meta{}, fmt.Errorf("precopy: unexpected %v section in verdict", sec.Type)
		}
		if m, err = parseMeta(sec.Blob); err != nil {
			return meta{}, err
		}
		if m.Phase != phaseVerdict {
			return meta{}, fmt.Errorf("precopy: verdict Meta has phase %q", m.Phase)
		}
		seen = true
	}
}

func encodeState(s vgpu.State) ([]byte, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(s); err != nil {
		return nil, fmt.Errorf("precopy: encoding device state: %w", err)
	}
	return b.Bytes(), nil
}

func decodeState(b []byte) (vgpu.State, error) {
	var s vgpu.State
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&s); err != nil {
		return vgpu.State{}, fmt.Errorf("precopy: decoding device state: %w", err)
	}
	return s, nil
}
