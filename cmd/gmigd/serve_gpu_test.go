package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/hostd"
)

// TestServeGPUFlag: serve -gpu (or gpu = in its configuration file)
// refuses a GPU the host does not have, naming those it has, and one
// another gmigd owns, naming that gmigd's run dir; the model of two GPUs
// stands in for a host's.
func TestServeGPUFlag(t *testing.T) {
	t.Setenv(nvidia.ModelEnv, "2")
	locks := t.TempDir()
	conf := filepath.Join(t.TempDir(), "gmigd.conf")
	if err := os.WriteFile(conf, []byte("gpu = 5\ngpu-lock-dir = "+locks+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"-gpu", "5", "-gpu-lock-dir", locks}, {"-config", conf}} {
		err := cmdServe(append([]string{"-run-dir", t.TempDir()}, args...))
		if !errors.Is(err, hostd.ErrNoGPU) || !strings.Contains(err.Error(), "GPU 5") || !strings.Contains(err.Error(), nvidia.ModelUUID(1)) {
			t.Fatalf("serve %q: %v, want ErrNoGPU naming GPU 5 and the GPUs there are", args, err)
		}
	}
	first := claimGPU(t, "1", locks)
	err := cmdServe([]string{"-run-dir", t.TempDir(), "-gpu", nvidia.ModelUUID(1), "-gpu-lock-dir", locks})
	if !errors.Is(err, hostd.ErrGPUInUse) || !strings.Contains(err.Error(), first) {
		t.Fatalf("serve on a GPU another gmigd owns: %v, want ErrGPUInUse naming %s", err, first)
	}
}

// claimGPU starts a host on GPU sel with locks in dir and returns its run
// directory.
func claimGPU(t *testing.T, sel, dir string) string {
	t.Helper()
	runDir := t.TempDir()
	h, err := hostd.New(hostd.Config{PoolSize: 16 << 20, RunDir: runDir, Log: zerolog.Nop(), GPU: sel, GPULockDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return runDir
}

// TestStatusGPUOwners: gmigd status lists each GPU with the gmigd that
// owns it, read from the locks, in text and in JSON.
func TestStatusGPUOwners(t *testing.T) {
	t.Setenv(nvidia.ModelEnv, "2")
	locks := t.TempDir()
	owner := claimGPU(t, "1", locks)
	code, out, errOut := runCLI(t, "status", "-gpu-lock-dir", locks)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	t.Log(out)
	var line0, line1 string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(l, nvidia.ModelUUID(0)):
			line0 = l
		case strings.Contains(l, nvidia.ModelUUID(1)):
			line1 = l
		}
	}
	if !strings.Contains(line1, "run dir "+owner) || !strings.HasSuffix(strings.TrimSpace(line0), "-") {
		t.Fatalf("status: GPU 0 %q (want no owner), GPU 1 %q (want run dir %s)", line0, line1, owner)
	}
	code, out, errOut = runCLI(t, "status", "-json", "-gpu-lock-dir", locks)
	var st status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.GPUs.GPUs) != 2 {
		t.Fatalf("status -json: exit %d: %s %s", code, out, errOut)
	}
	if o := st.GPUs.GPUs[1].Owner; o == nil || o.RunDir != owner || o.PID != os.Getpid() || st.GPUs.GPUs[0].Owner != nil {
		t.Fatalf("status -json: owners %+v, %+v", st.GPUs.GPUs[0].Owner, o)
	}
}
