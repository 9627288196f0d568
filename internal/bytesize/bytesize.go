// Package bytesize reads byte counts as operators write them: 4096, 64M,
// 1G, 1GiB, 2GB (binary units: K, M, G, T are powers of 1024).
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse reads a byte count with an optional binary suffix K, M, G or T,
// with or without "iB" or "B", in either case.
func Parse(s string) (uint64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B"), "I")
	shift := 0
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift != 0 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseUint(t, 10, 64)
	if err != nil || v > (^uint64(0))>>shift {
		return 0, fmt.Errorf("bad size %q (want e.g. 64M, 1G, 4096)", s)
	}
	return v << shift, nil
}
