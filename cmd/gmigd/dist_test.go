package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDistConfig: serve accepts the example configuration in dist/ (every
// name is one of its flags, every value parses). A -decision-timeout of 0
// on the command line stops serve right after it has read the file,
// before anything starts: the error must be that one.
func TestDistConfig(t *testing.T) {
	err := cmdServe([]string{"-config", filepath.Join("..", "..", "dist", "gmigd.conf"), "-decision-timeout", "0s"})
	if err == nil || !strings.Contains(err.Error(), "-decision-timeout") {
		t.Fatalf("serve -config dist/gmigd.conf: %v", err)
	}
}
