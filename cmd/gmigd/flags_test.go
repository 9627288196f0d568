package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/orchestrator"
)

// TestMigrationTimeoutFlags: serve's timeout flags default to the
// orchestrator's, take what they are given, and a non-positive one is
// refused before gmigd starts.
func TestMigrationTimeoutFlags(t *testing.T) {
	parse := func(args ...string) (orchestrator.Timeouts, error) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var m migrationTimeouts
		m.register(fs)
		if err := fs.Parse(args); err != nil {
			return orchestrator.Timeouts{}, err
		}
		return m.timeouts()
	}
	got, err := parse()
	want := orchestrator.Timeouts{Message: orchestrator.DefaultMessageTimeout, Data: orchestrator.DefaultDataTimeout,
		Decision: orchestrator.DefaultDecisionTimeout, Resolve: orchestrator.DefaultResolveTimeout, Beat: orchestrator.DefaultBeatTimeout}
	if err != nil || got != want {
		t.Fatalf("defaults %+v (%v), want %+v", got, err, want)
	}
	got, err = parse("-decision-timeout", "30s", "-resolve-timeout", "10m", "-message-timeout", "5s")
	if err != nil || got.Decision != 30*time.Second || got.Resolve != 10*time.Minute || got.Message != 5*time.Second || got.Data != want.Data {
		t.Fatalf("set %+v (%v)", got, err)
	}
	for _, bad := range [][]string{{"-decision-timeout", "0"}, {"-beat-timeout", "-1s"}, {"-data-timeout", "soon"}} {
		if _, err := parse(bad...); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// serve refuses it before it creates anything.
	err = cmdServe([]string{"-run-dir", t.TempDir(), "-decision-timeout", "0s"})
	if err == nil || !strings.Contains(err.Error(), "-decision-timeout") {
		t.Fatalf("gmigd serve -decision-timeout 0s: %v", err)
	}
}

// TestStreamsFlag: serve and migrate refuse a -streams out of range before
// anything starts or is asked.
func TestStreamsFlag(t *testing.T) {
	for _, n := range []string{"-1", "65"} {
		err := cmdServe([]string{"-run-dir", t.TempDir(), "-streams", n})
		if err == nil || !strings.Contains(err.Error(), "-streams "+n) {
			t.Errorf("gmigd serve -streams %s: %v", n, err)
		}
		err = cmdMigrate([]string{"vm", "-run-dir", t.TempDir(), "-to", "127.0.0.1:1", "-streams", n})
		if err == nil || !strings.Contains(err.Error(), "-streams "+n) {
			t.Errorf("gmigd migrate -streams %s: %v", n, err)
		}
	}
}
