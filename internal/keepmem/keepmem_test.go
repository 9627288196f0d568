package keepmem

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestEnv(t *testing.T) {
	cases := []struct {
		in      []string
		want    []string
		changed bool
	}{
		{[]string{"A=1"}, []string{"A=1", "GODEBUG=" + Setting}, true},
		{[]string{"GODEBUG="}, []string{"GODEBUG=" + Setting}, true},
		{[]string{"GODEBUG=gctrace=1", "B=2"}, []string{"GODEBUG=gctrace=1," + Setting, "B=2"}, true},
		{[]string{"GODEBUG=madvdontneed=1"}, []string{"GODEBUG=madvdontneed=1"}, false},
		{[]string{"GODEBUG=x=1,madvdontneed=0"}, []string{"GODEBUG=x=1,madvdontneed=0"}, false},
	}
	for _, c := range cases {
		got, changed := Env(c.in)
		if changed != c.changed || !slices.Equal(got, c.want) {
			t.Errorf("Env(%q) = %q, %v; want %q, %v", c.in, got, changed, c.want, c.changed)
		}
	}
}

// TestEnsureReexecutes runs this test binary as a child that calls Ensure
// and prints its GODEBUG: the child must see the setting, proving the
// re-execution happened and kept the arguments.
func TestEnsureReexecutes(t *testing.T) {
	if os.Getenv("KEEPMEM_CHILD") == "1" {
		Ensure()
		os.Stdout.WriteString("GODEBUG=" + os.Getenv("GODEBUG") + "\n")
		os.Exit(0)
	}
	for _, c := range []struct{ optOut, want string }{{"", Setting}, {"0", ""}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestEnsureReexecutes$")
		cmd.Env = append(os.Environ(), "KEEPMEM_CHILD=1", "GODEBUG=", optOut+"="+c.optOut)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child: %v", err)
		}
		if got := strings.TrimSpace(string(out)); got != "GODEBUG="+c.want {
			t.Errorf("GMIG_KEEPMEM=%q: child saw %q, want GODEBUG=%s", c.optOut, got, c.want)
		}
	}
}
