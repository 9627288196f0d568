package bytesize

import "testing"

func TestParse(t *testing.T) {
	good := map[string]uint64{
		"4096": 4096, "64M": 64 << 20, "64MiB": 64 << 20, "1g": 1 << 30, "2GB": 2 << 30, "8K": 8 << 10, " 1T ": 1 << 40,
	}
	for in, want := range good {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "M", "-1", "1X", "99999999999999999999", "20000000000T"} {
		if _, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) accepted", in)
		}
	}
}
