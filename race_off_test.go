//go:build !race

package gust

// raceEnabled: this test binary runs without the race detector.
const raceEnabled = false
