//go:build race

package interop

// raceEnabled: this test binary runs with the race detector, so the
// programs it builds (examples/h2) are built with -race too.
const raceEnabled = true
