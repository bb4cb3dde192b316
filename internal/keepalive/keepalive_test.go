package keepalive

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A peer silent since tick 10 is checked at 10+interval+1, pinged then,
// checked again within the interval while the pong is missing, and cut
// once the timeout has passed since the ping.
func TestSilentPeerIsPingedThenCut(t *testing.T) {
	const interval, timeout = 8, 20
	var s State
	due, a := s.Check(12, 10, false, interval, timeout)
	require.Equal(t, Wait, a)
	require.Equal(t, uint64(10+interval+1), due, "the first tick the silence has surely lasted the interval")

	due, a = s.Check(due, 10, false, interval, timeout)
	require.Equal(t, Ping, a)
	pinged := uint64(10 + interval + 1)
	require.Equal(t, pinged+interval, due)

	for _, want := range []uint64{pinged + 2*interval, pinged + timeout} {
		due, a = s.Check(due, 10, false, interval, timeout)
		require.Equal(t, Wait, a, "the pong may be late")
		require.Equal(t, want, due, "within the interval, or at the timeout")
	}

	due, a = s.Check(due, 10, false, interval, timeout)
	require.Equal(t, Cut, a)
	require.Equal(t, pinged+timeout+interval, due)
}

// A timeout shorter than the interval: the check after the ping comes at
// the timeout.
func TestShortTimeout(t *testing.T) {
	const interval, timeout = 8, 2
	var s State
	due, a := s.Check(20, 10, false, interval, timeout)
	require.Equal(t, Ping, a)
	require.Equal(t, uint64(20+timeout), due)
	_, a = s.Check(due, 10, false, interval, timeout)
	require.Equal(t, Cut, a)
}

// An alive peer (bytes arriving, a callback running, a closing handshake)
// is never pinged, and a ping's pong ends the silence it was sent for.
func TestAliveResets(t *testing.T) {
	const interval, timeout = 8, 20
	var s State
	due, a := s.Check(100, 0, true, interval, timeout)
	require.Equal(t, Wait, a)
	require.Equal(t, uint64(100+interval), due)

	_, a = s.Check(100, 10, false, interval, timeout)
	require.Equal(t, Ping, a)
	due, a = s.Check(101, 0, true, interval, timeout)
	require.Equal(t, Wait, a)
	require.Equal(t, uint64(101+interval), due)
	require.Zero(t, s.pinged, "the ping is forgotten")

	_, a = s.Check(102, 10, false, interval, timeout)
	require.Equal(t, Ping, a)
	due, a = s.Check(103, 102, false, interval, timeout) // the pong came, then a wait began
	require.Equal(t, Wait, a)
	require.Equal(t, uint64(102+interval+1), due)
	require.Zero(t, s.pinged)
}

// A pong that comes after the next check (a busy process): the check that
// finds it missing comes back within the interval, not at the timeout, so
// the ping after the pong is the interval after it.
func TestLatePongKeepsTheCadence(t *testing.T) {
	const interval, timeout = 4, 3600
	var s State
	seen := uint64(10) // waiting since tick 10

	due, a := s.Check(10+interval+1, seen, false, interval, timeout)
	require.Equal(t, Ping, a, "silent for the interval: pinged")
	pinged := uint64(10 + interval + 1)

	due, a = s.Check(due, seen, false, interval, timeout) // the pong has not come yet
	require.Equal(t, Wait, a)
	require.LessOrEqual(t, due, pinged+2*interval, "a late pong is looked for within the interval")

	seen = due - 1 // the pong came, then silence again
	for range 3 {
		due, a = s.Check(due, seen, false, interval, timeout)
		if a != Wait {
			break
		}
	}
	require.Equal(t, Ping, a, "pinged again the interval after the late pong")
	require.LessOrEqual(t, due, pinged+4*interval+2)
}
