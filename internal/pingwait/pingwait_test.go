package pingwait

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A connection that never pinged holds no set of waiters, and once it has
// ended a Ping fails at once.
func TestSetIsMadeByTheFirstPing(t *testing.T) {
	var s Set
	s.Pong(make([]byte, PayloadSize)) // a pong nobody waits for
	require.Nil(t, s.p.Load())
	require.Zero(t, s.Waiting())
	ch := make(chan time.Time, 1)
	p, ok := s.Add(ch)
	require.True(t, ok)
	require.NotNil(t, s.p.Load())
	require.Equal(t, 1, s.Waiting())
	s.Pong(p[:])
	require.Len(t, ch, 1)
	require.Zero(t, s.Waiting())
	s.End()
	_, ok = s.Add(make(chan time.Time, 1))
	require.False(t, ok)

	var never Set
	never.End()
	_, ok = never.Add(make(chan time.Time, 1))
	require.False(t, ok, "a Ping after the end fails")
	never.End() // twice is harmless
	require.Zero(t, never.Waiting())
}

// Each pong wakes the Ping of its payload only, once; pongs of another
// size, unknown payloads and repeats wake nobody.
func TestPongWakesItsOwnPing(t *testing.T) {
	var s Set
	a, b := make(chan time.Time, 1), make(chan time.Time, 1)
	pa, ok := s.Add(a)
	require.True(t, ok)
	pb, ok := s.Add(b)
	require.True(t, ok)
	require.Equal(t, binary.BigEndian.Uint64(pa[:])+1, binary.BigEndian.Uint64(pb[:]), "a counter")

	s.Pong(pa[:PayloadSize-1])
	s.Pong(append(pa[:], 0))
	other := binary.BigEndian.AppendUint64(nil, binary.BigEndian.Uint64(pb[:])+1)
	s.Pong(other)
	require.Empty(t, a)
	require.Empty(t, b)

	before := time.Now()
	s.Pong(pb[:])
	require.Empty(t, a)
	require.Len(t, b, 1)
	require.False(t, (<-b).Before(before), "the time the pong came")
	s.Pong(pb[:]) // a repeat: nobody waits for it, and b is not sent to twice
	require.Empty(t, b)
	require.Equal(t, 1, s.Waiting())
}

// A Ping that gave up is forgotten: its late pong wakes nothing, and End
// does not close its channel.
func TestRemove(t *testing.T) {
	var s Set
	s.Remove([PayloadSize]byte{}) // before any Ping: nothing to do
	ch := make(chan time.Time, 1)
	p, ok := s.Add(ch)
	require.True(t, ok)
	s.Remove(p)
	require.Zero(t, s.Waiting())
	s.Pong(p[:])
	require.Empty(t, ch)
	s.End()
	select {
	case _, ok := <-ch:
		t.Fatalf("the channel of a removed Ping was touched (ok=%v)", ok)
	default:
	}
}

// End closes the channel of every Ping still waiting.
func TestEndClosesWaiters(t *testing.T) {
	var s Set
	chs := make([]chan time.Time, 3)
	for i := range chs {
		chs[i] = make(chan time.Time, 1)
		_, ok := s.Add(chs[i])
		require.True(t, ok)
	}
	s.End()
	for _, ch := range chs {
		_, ok := <-ch
		require.False(t, ok, "closed, no value")
	}
	require.Zero(t, s.Waiting())
	s.End()
}

// Pings from many goroutines each get their own pong, while the first Adds
// race to make the waiters.
func TestConcurrent(t *testing.T) {
	var s Set
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 100 {
				ch := make(chan time.Time, 1)
				p, ok := s.Add(ch)
				if !ok {
					t.Error("Add failed before End")
					return
				}
				s.Pong(p[:])
				if _, ok := <-ch; !ok {
					t.Error("a Ping's channel was closed before End")
					return
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, s.Waiting())
}
