package dirty

import (
	"fmt"
	"strings"
)

// DescribeBySource says how many dirty pages each Source found, for
// reports and logs: "engine 12, hash 3" (Sources with none left out), or
// "none".
func DescribeBySource(n [NumSources]int) string {
	var parts []string
	for s, c := range n {
		if c > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", Source(s), c))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
