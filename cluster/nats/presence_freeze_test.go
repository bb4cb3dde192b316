package gustnats

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust/hub"
)

// freeze stops in's presence as SIGSTOP would (no heartbeat, no message
// handled, Join and Leave wait) by holding its lock; the returned func
// thaws it. Its NATS connection stays up and queues what comes, as the
// socket of a stopped process does.
func (in *instance) freeze() (thaw func()) {
	in.p.mu.Lock()
	return in.p.mu.Unlock
}

// knows reports whether in's presence has heard other since it last
// dropped it.
func (in *instance) knows(other *instance) bool {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	return in.p.peers[other.p.ID()] != nil
}

// drain waits until in's presence goroutine has handled every message the
// NATS server had for in when drain was called: the flush puts them in its
// queue, and a poke sent once the queue has been empty is taken only by a
// later turn of the loop than the one that took the last of them.
func (in *instance) drain(t *testing.T) {
	t.Helper()
	require.NoError(t, in.nc.Flush())
	waitFor(t, in.name+"'s queue to empty", func() bool { return len(in.p.ch) == 0 })
	in.p.poke()
	waitFor(t, in.name+"'s loop to turn", func() bool { return len(in.p.wake) == 0 })
}

// An instance stopped past Expiry (its lock held: no heartbeat, nothing
// handled) is dropped by the others. On waking it is asked for its members
// at once, but xena's connection closed while it was stopped and is seen
// closed only after that question is in (as a read loop's OnClose comes
// after the process has caught up with NATS): the others get no join for
// her, and one for xavier, still there, once ResumeGrace has passed. Joins
// and leaves made during the grace go out at once. The stopped instance
// itself drops nobody for the silence it could not hear.
func TestPresenceFrozenPastExpiry(t *testing.T) {
	const grace = time.Second // the test's steps after waking take milliseconds
	ns := startNATS(t, 0)
	a := newInstance(t, "a", ns.ClientURL(), &instanceOpts{watch: []string{"room"}})
	x := newInstance(t, "x", ns.ClientURL(), &instanceOpts{watch: []string{"room"}, presence: PresenceOptions{ResumeGrace: grace}})
	require.NoError(t, a.p.Join("room", "al"))
	require.NoError(t, x.p.Join("room", "xavier"))
	require.NoError(t, x.p.Join("room", "xena"))
	a.members(t, "room", "al", "xavier", "xena")
	x.members(t, "room", "al", "xavier", "xena")
	a.events.Wait(t, 3)
	x.events.Wait(t, 3)

	thaw := x.freeze()
	a.members(t, "room", "al") // dropped after Expiry, with a leave each
	require.ElementsMatch(t, []hub.PresenceEvent{leaveEv("room", "xavier"), leaveEv("room", "xena")}, a.events.Wait(t, 5)[3:])
	woke := time.Now()
	thaw()

	// x's first heartbeat makes a ask it for its members; once x has
	// taken the question, xena's connection is seen closed, and a member
	// comes and goes.
	waitFor(t, "a to hear x again", func() bool { return a.knows(x) })
	require.NoError(t, a.nc.Flush())
	x.drain(t)
	require.NoError(t, x.p.Leave("room", "xena"))
	require.NoError(t, x.p.Join("room", "xo"))
	require.Less(t, time.Since(woke), grace, "the test's steps took longer than the grace: nothing shown")
	a.members(t, "room", "al", "xavier", "xo")
	back := time.Since(woke)
	require.NoError(t, x.p.Leave("room", "xo")) // after the answer: a has seen all before it once it sees this
	a.members(t, "room", "al", "xavier")
	require.Equal(t, []hub.PresenceEvent{joinEv("room", "xo"), joinEv("room", "xavier"), leaveEv("room", "xo")}, a.events.Get()[5:],
		"no join for xena, who left while x was stopped; xo told at once")
	require.GreaterOrEqual(t, back, grace, "xavier came back after the grace")

	// x dropped nobody for the silence it could not hear: al stayed in its
	// view (a drop and a's answer would be in x's events before ada).
	require.NoError(t, a.p.Join("room", "ada"))
	x.members(t, "room", "ada", "al", "xavier")
	require.Equal(t, []hub.PresenceEvent{leaveEv("room", "xena"), joinEv("room", "xo"), leaveEv("room", "xo"), joinEv("room", "ada")}, x.events.Wait(t, 7)[3:])
}

// caughtUp credits the time the goroutine ran late, past half lateLimit,
// to every peer's clock, never past now, and holds the answers back only
// from lateLimit on.
func TestPresenceCaughtUp(t *testing.T) {
	t0 := time.Now()
	ms := time.Millisecond
	p := &Presence{
		lateLimit:   100 * ms,
		resumeGrace: time.Second,
		logger:      slog.New(slog.DiscardHandler),
		wakeAt:      t0,
		peers: map[string]*peer{
			"old": {heard: t0.Add(-500 * ms)},
			"odd": {heard: t0.Add(60 * ms)}, // after wakeAt: never so, but bounded all the same
		},
	}
	p.caughtUp(t0.Add(30 * ms)) // a busy machine's timer: nothing
	require.Equal(t, t0, p.wakeAt)
	require.Equal(t, t0.Add(-500*ms), p.peers["old"].heard)

	now := t0.Add(80 * ms) // late, not stopped past the limit
	p.caughtUp(now)
	require.Equal(t, now, p.wakeAt)
	require.Equal(t, t0.Add(-470*ms), p.peers["old"].heard, "30 ms past the half credited")
	require.Equal(t, now, p.peers["odd"].heard, "never past now")
	require.True(t, p.holdUntil.IsZero(), "no hold below lateLimit")

	now = now.Add(2 * time.Second) // stopped
	p.caughtUp(now)
	require.Equal(t, now.Add(-600*ms), p.peers["old"].heard, "550 ms of silence before the stop, and the 50 ms a timer may be late")
	require.Equal(t, now.Add(time.Second), p.holdUntil)
}
