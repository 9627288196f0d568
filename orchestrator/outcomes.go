package orchestrator

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Outcome is what a destination decided about one migration, as it
// answers the source's questions. It is written before it becomes true:
// "resumed" before the VM is resumed, so a destination that crashes right
// after (or whose gmigd restarts) never denies a VM it may be running.
type Outcome struct {
	State string    `json:"state"` // pending, resumed, aborted
	At    time.Time `json:"at"`
	// PID is the destination VMM's process while the migration is
	// pending: a restarted gmigd kills a pending migration's VMM, which
	// never ran the VM (it waits paused for the commit).
	PID int `json:"pid,omitempty"`
}

// OutcomeStore keeps a destination's outcomes. Save must be durable when it
// returns (the commit relies on it).
type OutcomeStore interface {
	Save(id string, o Outcome) error
	Load(id string) (Outcome, bool)
}

// MemoryOutcomes keeps outcomes in memory only: a restarted destination
// forgets them (fine for in-process hosts, whose VMs die with them).
type MemoryOutcomes struct {
	mu sync.Mutex
	m  map[string]Outcome
}

// Save keeps o, forgetting aborted outcomes older than outcomeKeep.
func (s *MemoryOutcomes) Save(id string, o Outcome) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]Outcome{}
	}
	for k, v := range s.m {
		if v.State == outcomeAborted && time.Since(v.At) > outcomeKeep {
			delete(s.m, k)
		}
	}
	s.m[id] = o
	return nil
}

// Load returns id's outcome.
func (s *MemoryOutcomes) Load(id string) (Outcome, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.m[id]
	return o, ok
}

// FileOutcomes keeps outcomes as one small JSON file per migration in Dir,
// written and synced before Save returns.
type FileOutcomes struct{ Dir string }

var idRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

func (s FileOutcomes) path(id string) (string, error) {
	if !idRE.MatchString(id) {
		return "", fmt.Errorf("orchestrator: malformed migration id %q", id)
	}
	return filepath.Join(s.Dir, id+".json"), nil
}

// Save writes o for id durably (temporary file, fsync, rename, fsync the
// directory).
func (s FileOutcomes) Save(id string, o Outcome) error {
	p, err := s.path(id)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.Dir, 0o750); err != nil {
		return fmt.Errorf("orchestrator: outcome directory: %w", err)
	}
	b, _ := json.Marshal(o)
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("orchestrator: saving outcome: %w", err)
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("orchestrator: saving outcome: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("orchestrator: saving outcome: %w", err)
	}
	if d, err := os.Open(s.Dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Load reads id's outcome.
func (s FileOutcomes) Load(id string) (Outcome, bool) {
	p, err := s.path(id)
	if err != nil {
		return Outcome{}, false
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return Outcome{}, false
	}
	var o Outcome
	if json.Unmarshal(b, &o) != nil {
		return Outcome{}, false
	}
	return o, true
}

// Pending lists the migrations left pending (by a destination that
// stopped in the middle of them), with their records.
func (s FileOutcomes) Pending() map[string]Outcome {
	out := map[string]Outcome{}
	ents, _ := os.ReadDir(s.Dir)
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		if o, ok := s.Load(id); ok && o.State == outcomePending {
			out[id] = o
		}
	}
	return out
}
