//go:build !(linux && amd64)

package ptinject

// Userfaultfd is not implemented here: the injection sets x86-64 registers.
func Userfaultfd(pid, flags int) (int, error) { return -1, ErrUnsupported }
