//go:build race

package gust

// raceEnabled: this test binary runs with the race detector, whose
// sync.Pool drops a quarter of what it is given, so allocation counts
// mean nothing.
const raceEnabled = true
