package cudadrv

import (
	"fmt"
	"strings"
)

// Result is a CUresult: what every driver API entry point returns.
type Result int32

// Name is the enumerator's name (cuGetErrorName); ok is false for a number
// the enum does not have.
func (r Result) Name() (name string, ok bool) {
	e, ok := results[r]
	return e.name, ok
}

// Text is the description cuGetErrorString gives; ok is false for a number
// the enum does not have.
func (r Result) Text() (text string, ok bool) {
	e, ok := results[r]
	return e.text, ok
}

func (r Result) String() string {
	if n, ok := r.Name(); ok {
		return n
	}
	return fmt.Sprintf("CUresult(%d)", int32(r))
}

// Error makes a failed Result an error, for callers in Go.
func (r Result) Error() string {
	t, _ := r.Text()
	return "cudadrv: " + r.String() + ": " + strings.TrimSpace(t)
}
