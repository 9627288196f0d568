// Package guestwrites picks, at run time, how gmigd learns which pages of
// a vGPU's aperture the guest CPU wrote, and says which and why: the
// write log of a migration's dirty tracking (dirty.WriteLog).
//
// The mechanisms, best first, each trusted only after its self-test:
//
//   - uffd-wp: userfaultfd write protection in its asynchronous mode,
//     read with PAGEMAP_SCAN (package uffdwp), in the process that maps
//     the aperture for the guest — QEMU, by ptrace injection, or gmigd
//     itself for the in-process simulator. Exact, and a lost registration
//     shows as an error rather than a silent miss.
//   - soft-dirty: the kernel's soft-dirty page bits (package softdirty),
//     where the kernel really has them and its self-test shows they keep
//     a write across a dropped page-table entry (which shmem loses on
//     every kernel seen so far, so in practice it is refused).
//   - full hash: no log; every page is hashed at the stop, as without
//     this package. Always correct.
//
// Open never fails: with nothing trusted it returns no log and a Choice
// whose detail lists why each mechanism was refused. There is no state
// between calls beyond the self-tests' cached results.
package guestwrites

import (
	"fmt"
	"os"
	"strings"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/softdirty"
	"github.com/gmig-dev/gmig/internal/uffdwp"
)

// Modes a Choice names.
const (
	ModeUffdWP    = "uffd-wp"
	ModeSoftDirty = "soft-dirty"
	ModeFullHash  = "full hash"
)

// Choice is the mechanism Open chose and why.
type Choice struct {
	Mode   string
	Detail string
}

// String is the report's form: "uffd-wp (pid 1234, 1 mapping)".
func (c Choice) String() string {
	if c.Detail == "" {
		return c.Mode
	}
	return c.Mode + " (" + c.Detail + ")"
}

// Log is an open write log: a dirty.WriteLog the caller closes.
type Log interface {
	Arm() error
	Written(dst []int) ([]int, error)
	Close() error
}

// Open returns the best trusted write log of process pid's writes (0: this
// process) to its mappings of f, the vGPU's aperture memfd, or nil and the
// reasons none was trusted. The choice is logged.
func Open(pid int, f *os.File, log zerolog.Logger) (Log, Choice) {
	who := fmt.Sprintf("pid %d", pid)
	if pid == 0 || pid == os.Getpid() {
		who = "this process"
	}
	var why []string
	if err := uffdwp.SelfTest(); err != nil {
		why = append(why, ModeUffdWP+": "+err.Error())
	} else if l, err := uffdwp.Open(pid, f); err != nil {
		why = append(why, ModeUffdWP+": "+err.Error())
	} else {
		c := Choice{Mode: ModeUffdWP, Detail: fmt.Sprintf("%s, %d mapping(s)", who, len(l.Ranges()))}
		log.Info().Str("tracking", c.String()).Msg("guest writes to the aperture are logged")
		return l, c
	}
	if err := softdirty.SelfTest(); err != nil {
		why = append(why, ModeSoftDirty+": "+err.Error())
	} else if l, err := softdirty.Open(pid, f); err != nil {
		why = append(why, ModeSoftDirty+": "+err.Error())
	} else {
		c := Choice{Mode: ModeSoftDirty, Detail: who}
		log.Info().Str("tracking", c.String()).Msg("guest writes to the aperture are logged")
		return l, c
	}
	c := Choice{Mode: ModeFullHash, Detail: strings.Join(why, "; ")}
	log.Warn().Str("tracking", c.String()).Msg("no trusted log of guest writes; the stop phase hashes every page")
	return nil, c
}
