package hub_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gustws/gust/hub"
	"github.com/gustws/gust/internal/testkit"
)

func joined(topic, member string) hub.PresenceEvent {
	return hub.PresenceEvent{Topic: topic, Member: member, Joined: true}
}

func left(topic, member string) hub.PresenceEvent {
	return hub.PresenceEvent{Topic: topic, Member: member}
}

// Joins are counted per member: a watcher hears of the first join and the
// last leave only; Members is sorted and per topic.
func TestLocalPresenceCounts(t *testing.T) {
	var p hub.LocalPresence
	var r testkit.Recorder[hub.PresenceEvent]
	stop, err := p.Watch("room", r.Add)
	require.NoError(t, err)
	defer stop()

	require.NoError(t, p.Join("room", "carol"))
	require.NoError(t, p.Join("room", "ann"))
	require.NoError(t, p.Join("room", "ann")) // a second tab
	require.NoError(t, p.Join("other", "bob"))
	require.NoError(t, p.Leave("room", "nobody"))
	require.NoError(t, p.Leave("other", "ann"))
	require.Equal(t, []string{"ann", "carol"}, p.Members(nil, "room"))
	require.Equal(t, []string{"x", "bob"}, p.Members([]string{"x"}, "other"))
	require.Empty(t, p.Members(nil, "empty"))

	require.NoError(t, p.Leave("room", "ann"))
	require.Equal(t, []string{"ann", "carol"}, p.Members(nil, "room"), "one tab is left")
	require.NoError(t, p.Leave("room", "ann"))
	require.Equal(t, []string{"carol"}, p.Members(nil, "room"))
	require.NoError(t, p.Leave("room", "ann"), "one leave too many")
	require.NoError(t, p.Join("room", "ann"))

	want := []hub.PresenceEvent{joined("room", "carol"), joined("room", "ann"), left("room", "ann"), joined("room", "ann")}
	require.Equal(t, want, r.Wait(t, len(want)))
	time.Sleep(20 * time.Millisecond) // an extra event would show now
	require.Equal(t, want, r.Get())
}

// A watcher hears of the changes made after Watch, not of those before,
// even when they are not yet told; after stop it hears nothing. Watchers
// may call the Presence.
func TestLocalPresenceWatch(t *testing.T) {
	p := hub.NewLocalPresence()
	block := make(chan struct{})
	var first testkit.Recorder[hub.PresenceEvent]
	stop1, err := p.Watch("room", func(ev hub.PresenceEvent) {
		first.Add(ev)
		if ev.Member == "ann" {
			<-block // hold the queue: bob's join waits behind it
		}
		p.Members(nil, ev.Topic) // watchers may call the Presence
	})
	require.NoError(t, err)
	require.NoError(t, p.Join("room", "ann"))
	require.NoError(t, p.Join("room", "bob"))
	waitFor(t, "ann's join to be told", 5*time.Second, func() bool { return len(first.Get()) == 1 })

	var second testkit.Recorder[hub.PresenceEvent]
	stop2, err := p.Watch("room", func(ev hub.PresenceEvent) {
		second.Add(ev)
		if ev.Member == "carol" {
			assert.NoError(t, p.Join("room", "dave")) // and change it
		}
	})
	require.NoError(t, err)
	require.NoError(t, p.Join("room", "carol"))
	close(block)
	want := []hub.PresenceEvent{joined("room", "ann"), joined("room", "bob"), joined("room", "carol"), joined("room", "dave")}
	require.Equal(t, want, first.Wait(t, 4))
	require.Equal(t, want[2:], second.Wait(t, 2))

	stop2()
	stop2() // a second stop does nothing
	require.NoError(t, p.Leave("room", "dave"))
	require.Equal(t, left("room", "dave"), first.Wait(t, 5)[4])
	stop1()
	require.NoError(t, p.Leave("room", "carol"))
	time.Sleep(20 * time.Millisecond)
	require.Len(t, first.Get(), 5)
	require.Len(t, second.Get(), 2)
}

// Concurrent joins and leaves: each member's events alternate, starting
// with a join, and replaying them gives Members.
func TestLocalPresenceConcurrent(t *testing.T) {
	var p hub.LocalPresence
	var r testkit.Recorder[hub.PresenceEvent]
	stop, err := p.Watch("room", r.Add)
	require.NoError(t, err)
	defer stop()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				m := fmt.Sprint("m", (g+i)%7)
				assert.NoError(t, p.Join("room", m))
				if i%3 != 0 {
					assert.NoError(t, p.Leave("room", m))
				}
			}
		}()
	}
	wg.Wait()
	final := p.Members(nil, "room")
	require.NotEmpty(t, final)
	// The last event of each member says whether it is in.
	in := map[string]bool{}
	waitFor(t, "the events to settle", 5*time.Second, func() bool {
		clear(in)
		for _, ev := range r.Get() {
			require.NotEqual(t, in[ev.Member], ev.Joined, "%s: two events of one kind in a row", ev.Member)
			in[ev.Member] = ev.Joined
		}
		var now []string
		for m, ok := range in {
			if ok {
				now = append(now, m)
			}
		}
		return len(now) == len(final)
	})
	for _, m := range final {
		require.True(t, in[m], m)
	}
}

func TestLocalPresenceClose(t *testing.T) {
	var p hub.LocalPresence
	var r testkit.Recorder[hub.PresenceEvent]
	_, err := p.Watch("room", r.Add)
	require.NoError(t, err)
	require.NoError(t, p.Join("room", "ann"))
	r.Wait(t, 1)
	require.NoError(t, p.Close())
	require.ErrorIs(t, p.Join("room", "bob"), hub.ErrClosed)
	require.ErrorIs(t, p.Leave("room", "ann"), hub.ErrClosed)
	_, err = p.Watch("room", r.Add)
	require.ErrorIs(t, err, hub.ErrClosed)
	require.Empty(t, p.Members(nil, "room"))
	require.NoError(t, p.Close())
	require.Len(t, r.Get(), 1)
}

// A chat room on one process: two tabs of ann count once; the watcher (a
// server that tells its connections) hears of ann when she first comes and
// when her last tab closes.
func ExampleLocalPresence() {
	var p hub.LocalPresence
	events := make(chan hub.PresenceEvent, 8)
	stop, _ := p.Watch("lobby", func(ev hub.PresenceEvent) { events <- ev })
	defer stop()

	p.Join("lobby", "ann") // first tab
	p.Join("lobby", "bob")
	p.Join("lobby", "ann")  // second tab
	p.Leave("lobby", "ann") // one tab closes: ann stays
	fmt.Println(p.Members(nil, "lobby"))
	p.Leave("lobby", "ann")
	fmt.Println(p.Members(nil, "lobby"))
	for range 3 {
		ev := <-events
		fmt.Println(ev.Member, ev.Joined)
	}
	// Output:
	// [ann bob]
	// [bob]
	// ann true
	// bob true
	// ann false
}

// Everyone in a room stops watching it at once (a mass close, each
// connection's OnClose stopping its watch): each stop costs about the
// same whatever the room's size, not a copy of its watchers (which made
// the room's leaving cost the square of its size), and the watchers left
// still hear what follows, those stopped do not.
func TestLocalPresenceEveryoneStopsWatching(t *testing.T) {
	const n = 2000
	p := hub.NewLocalPresence()
	var heard [n]atomic.Int32
	stops := make([]func(), n)
	for i := range n {
		stop, err := p.Watch("room", func(hub.PresenceEvent) { heard[i].Add(1) })
		require.NoError(t, err)
		stops[i] = stop
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, stop := range stops[1:] {
		stop()
	}
	runtime.ReadMemStats(&after)
	// A copy of the room's watchers per stop made n allocations of up to
	// n pointers; compacting once half are stopped makes about log2(n).
	require.Less(t, after.Mallocs-before.Mallocs, uint64(n/10), "allocations of %d stops", n-1)

	require.NoError(t, p.Join("room", "ann"))
	waitFor(t, "the watcher left to hear ann's join", 5*time.Second, func() bool { return heard[0].Load() == 1 })
	stops[0]()
	require.NoError(t, p.Leave("room", "ann"))
	require.Equal(t, hub.PresenceStats{}, p.Stats(), "no member, no watcher: the room is forgotten")
	for i := 1; i < n; i++ {
		require.Zero(t, heard[i].Load(), "watcher %d was stopped", i)
	}
	require.Equal(t, int32(1), heard[0].Load())
}

// Watchers stopped at once from many goroutines, and some twice: a stop
// that came while another compacted its room's watchers was counted for a
// watcher already dropped, and a later compaction panicked in OnClose
// (makeslice: cap out of range) for members of a room everyone left.
func TestLocalPresenceStopsAtOnce(t *testing.T) {
	const rooms, size, goroutines = 200, 10, 16
	p := hub.NewLocalPresence()
	for i := range rooms { // a member keeps each room while its watchers stop
		require.NoError(t, p.Join(fmt.Sprint("room-", i), "ann"))
	}
	var stops []func()
	for i := range rooms * size {
		stop, err := p.Watch(fmt.Sprint("room-", i/size), func(hub.PresenceEvent) {}) // a room's watchers stop together
		require.NoError(t, err)
		stops = append(stops, stop)
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := g; i < len(stops); i += goroutines {
				stops[i]()
				runtime.Gosched()
				if i%7 == 0 {
					stops[i]() // stop is idempotent
				}
			}
		})
	}
	wg.Wait()
	for i := range rooms {
		require.NoError(t, p.Leave(fmt.Sprint("room-", i), "ann"))
	}
	require.Equal(t, hub.PresenceStats{}, p.Stats(), "every watcher stopped: every room is forgotten")
}

// Members stays sorted, each member once, through joins (some twice, as
// from two tabs) and leaves in random order.
func TestLocalPresenceMembersSorted(t *testing.T) {
	p := hub.NewLocalPresence()
	joins := map[string]int{}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		m := fmt.Sprint("user-", rng.IntN(300))
		if rng.IntN(3) == 0 {
			require.NoError(t, p.Leave("room", m))
			if joins[m] > 0 {
				joins[m]--
			}
		} else {
			require.NoError(t, p.Join("room", m))
			joins[m]++
		}
		if rng.IntN(50) == 0 {
			var want []string
			for m, n := range joins {
				if n > 0 {
					want = append(want, m)
				}
			}
			slices.Sort(want)
			require.Equal(t, want, p.Members([]string{"kept"}, "room")[1:])
		}
	}
}

// A crowd joining a room, each member asking for the list as it joins
// (examples/chat's welcome): 1,000 joins and lists.
func BenchmarkLocalPresenceJoinAndList(b *testing.B) {
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("user-%04d", (i*7919)%1000)
	}
	var dst []string
	for b.Loop() {
		p := hub.NewLocalPresence()
		for _, m := range names {
			p.Join("room", m)
			dst = p.Members(dst[:0], "room")
		}
	}
}
