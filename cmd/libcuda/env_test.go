package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/guest/cudadrv"
)

// TestStagingChunkEnv: GMIG_CUDA_STAGING_CHUNK reaches the library's
// Config in bytes; unset it is 0 (the library's default); a bad value is 0
// too, with a log line that names the variable and the default.
func TestStagingChunkEnv(t *testing.T) {
	for _, c := range []struct {
		env  string
		want uint64
		logs bool
	}{
		{"", 0, false},
		{"8M", 8 << 20, false},
		{"65536", 64 << 10, false},
		{"2k", 0, true},
		{"3000", 0, true},
		{"eight", 0, true},
		{"0", 0, true},
	} {
		var log bytes.Buffer
		getenv := func(k string) string {
			if k == "GMIG_CUDA_STAGING_CHUNK" {
				return c.env
			}
			return ""
		}
		got := stagingChunk(getenv, zerolog.New(&log))
		if got != c.want {
			t.Errorf("GMIG_CUDA_STAGING_CHUNK=%q: %d, want %d", c.env, got, c.want)
		}
		if logged := strings.Contains(log.String(), "GMIG_CUDA_STAGING_CHUNK"); logged != c.logs {
			t.Errorf("GMIG_CUDA_STAGING_CHUNK=%q: logged %v (%q), want %v", c.env, logged, log.String(), c.logs)
		}
		if c.logs && !strings.Contains(log.String(), `"default":4194304`) {
			t.Errorf("GMIG_CUDA_STAGING_CHUNK=%q: the log line does not give the default %d: %s", c.env, cudadrv.DefaultStagingChunk, log.String())
		}
	}
}
