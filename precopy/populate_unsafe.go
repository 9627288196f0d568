package precopy

import (
	"errors"

	"golang.org/x/sys/unix"
)

// populate backs every page of a partition now, outside the downtime. A
// partition is a range of the pool's memfd; pages never written are holes,
// and the first access to each faults (allocates and zeroes a page): about
// 40-70 ms per 64 MiB on the development machine. On the destination (write)
// a fresh partition is all holes and every arriving page would fault; on
// the source (read) the holes would fault when the final scan or
// stop-and-copy reads them, in the stop phase. Populating neither writes
// nor changes a byte. Kernels before 5.14 lack MADV_POPULATE_*; the pages
// then fault in when touched.
func populate(mem []byte, write bool) error {
	if len(mem) == 0 {
		return nil
	}
	advice := unix.MADV_POPULATE_READ
	if write {
		advice = unix.MADV_POPULATE_WRITE
	}
	err := unix.Madvise(mem, advice)
	if errors.Is(err, unix.EINVAL) {
		return nil
	}
	return err
}
