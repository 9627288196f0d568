package precopy

import (
	"bytes"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/internal/vgpu"
	"github.com/gmig-dev/gmig/precopy/stream"
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
	Name          string   `json:"name,omitempty"`
	MemSize       uint64   `json:"mem_size,omitempty"`
	GTTEntries    uint32   `json:"gtt_entries,omitempty"`
	Strategy      Strategy `json:"strategy,omitempty"`
	StateEncoding string   `json:"state_encoding,omitempty"`

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

// splitLog separates a compacted API log into what the device replays
// (kernel objects, fence, interrupt state: the APILog section) and the
// guest's config writes for the front end (the FrontEnd section).
func splitLog(es []apilog.Entry) (device, frontEnd []apilog.Entry) {
	for _, e := range es {
		if e.Kind == apilog.ConfigWrite {
			frontEnd = append(frontEnd, e)
		} else {
			device = append(device, e)
		}
	}
	return device, frontEnd
}

// logged is the device state the API log carries.
type logged struct {
	kernels            []engine.KernelObject // sorted by handle
	fence              uint64
	intStatus, intMask uint32
}

// loggedState reads what device entries of a compacted log describe.
func loggedState(device []apilog.Entry) logged {
	var l logged
	for _, e := range device {
		switch e.Kind {
		case apilog.KernelLoad:
			l.kernels = append(l.kernels, engine.KernelObject{Handle: e.Handle, Kind: e.Arg})
		case apilog.Fence:
			l.fence = e.Value
		case apilog.Interrupts:
			l.intStatus, l.intMask = e.Handle, e.Arg
		}
	}
	sortKernels(l.kernels)
	return l
}

// stripLogged checks that the log's device entries describe st exactly,
// then removes what they carry from st, so that on the destination the
// replayed log is the only source of kernel objects, FENCE_DONE and the
// interrupt registers. A disagreement is a bug in the recording, and
// migrating would lose state: it fails the migration (which rolls back).
func stripLogged(st *vgpu.State, device []apilog.Entry) error {
	l := loggedState(device)
	kernels := st.Engine.Kernels
	if kernels == nil {
		kernels = []engine.KernelObject{}
	}
	if l.kernels == nil {
		l.kernels = []engine.KernelObject{}
	}
	switch {
	case !slices.Equal(l.kernels, kernels):
		return fmt.Errorf("precopy: API log holds kernels %v, device %v", l.kernels, kernels)
	case l.fence != st.Engine.FenceDone:
		return fmt.Errorf("precopy: API log holds fence %d, device FENCE_DONE %d", l.fence, st.Engine.FenceDone)
	case l.intStatus != st.Regs.IntStatus || l.intMask != st.Regs.IntMask:
		return fmt.Errorf("precopy: API log holds interrupts %#x/%#x, device INT_STATUS/INT_MASK %#x/%#x",
			l.intStatus, l.intMask, st.Regs.IntStatus, st.Regs.IntMask)
	}
	st.Engine.Kernels = nil
	st.Engine.FenceDone = 0
	st.Regs.IntStatus, st.Regs.IntMask = 0, 0
	return nil
}
