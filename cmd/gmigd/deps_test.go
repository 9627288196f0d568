package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoPlottingLibraries: gmigd links no gonum.org package (the plots,
// with their fonts and LaTeX renderer, are gmig-bench's alone).
func TestNoPlottingLibraries(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to list gmigd's dependencies: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed only %q", deps)
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "gonum.org/") {
			t.Errorf("gmigd depends on %s", d)
		}
	}
}
