//go:build linux

package softdirty

import (
	"compress/gzip"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
)

// TestSelfTestRefusesWhatDoesNotTrack: on a kernel without soft-dirty
// (the CI kernel: clear_refs takes 4 and nothing is ever marked) the
// self-test fails and says so; where soft-dirty exists it must either
// pass or name the shmem weakness.
func TestSelfTestRefusesWhatDoesNotTrack(t *testing.T) {
	err := SelfTest()
	if !kernelHasSoftDirty(t) {
		if !errors.Is(err, ErrSelfTest) || !strings.Contains(err.Error(), "tracks nothing") {
			t.Fatalf("SelfTest on a kernel without soft-dirty = %v, want ErrSelfTest saying it tracks nothing", err)
		}
		return
	}
	if err != nil && !strings.Contains(err.Error(), "lost its bit") {
		t.Fatalf("SelfTest = %v", err)
	}
	t.Logf("soft-dirty self-test: %v", err)
}

// kernelHasSoftDirty reads the running kernel's configuration from
// /proc/config.gz; without it the test cannot tell and skips.
func kernelHasSoftDirty(t *testing.T) bool {
	t.Helper()
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		t.Skipf("the kernel's configuration is not published: %v", err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(cfg), "\nCONFIG_MEM_SOFT_DIRTY=y\n")
}
