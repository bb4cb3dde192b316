//go:build !race

package interop

// raceEnabled: this test binary runs without the race detector.
const raceEnabled = false
