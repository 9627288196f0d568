package dirty

import "testing"

func TestDescribeBySource(t *testing.T) {
	for _, c := range []struct {
		n    [NumSources]int
		want string
	}{
		{[NumSources]int{}, "none"},
		{[NumSources]int{Engine: 12, Hash: 3}, "engine 12, hash 3"},
		{[NumSources]int{Sample: 1}, "sample 1"},
	} {
		if got := DescribeBySource(c.n); got != c.want {
			t.Errorf("DescribeBySource(%v) = %q, want %q", c.n, got, c.want)
		}
	}
}
