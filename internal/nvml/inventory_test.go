package nvml

import (
	"strings"
	"testing"
)

// TestInventory reads the inventory on whatever machine this is: without
// NVML or a GPU that is a report, not a failure.
func TestInventory(t *testing.T) {
	r := Inventory()
	t.Logf("%+v\n%s", r, r)
	if !r.Available && r.Reason == "" {
		t.Fatal("NVML unavailable without a reason")
	}
	if r.Available && !strings.Contains(r.String(), "GPU(s)") {
		t.Fatalf("report %q", r)
	}
}
