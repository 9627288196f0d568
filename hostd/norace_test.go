//go:build !race

package hostd

const raceEnabled = false
