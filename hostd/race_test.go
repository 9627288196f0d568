//go:build race

package hostd

// raceEnabled: the race detector slows every step about 20 times.
const raceEnabled = true
