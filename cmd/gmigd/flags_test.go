package main

import "testing"

func TestParseSize(t *testing.T) {
	good := map[string]uint64{
		"4096": 4096, "64M": 64 << 20, "64MiB": 64 << 20, "1g": 1 << 30, "2GB": 2 << 30, "8K": 8 << 10,
	}
	for in, want := range good {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "M", "-1", "1X", "99999999999999999999", "20000000000T"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}
