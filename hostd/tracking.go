package hostd

import (
	"os"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/guestwrites"
	"github.com/gmig-dev/gmig/precopy"
)

// writerPID is the process through whose mappings of the vGPU's aperture
// the guest CPU writes: the VM's QEMU, or gmigd itself (0) for a VM of the
// in-process simulator.
func (r *vmRec) writerPID() int {
	if r.kind == KindQEMU && r.q != nil {
		return r.q.PID()
	}
	return 0
}

// guestWrites is precopy.Options.GuestWrites for a guest that writes the
// aperture through process pid's mappings (0: this one): the best trusted
// log internal/guestwrites finds, armed per migration and closed with it.
func guestWrites(pid int, log zerolog.Logger) func(*os.File) (precopy.WriteLog, string) {
	return func(aperture *os.File) (precopy.WriteLog, string) {
		l, c := guestwrites.Open(pid, aperture, log)
		return l, c.String()
	}
}
