package wheel

import (
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gustws/gust/internal/leakcheck"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Run(m, "github.com/gustws/gust/internal/wheel"))
}

// item records the ticks it was checked at; each check schedules the next
// after every ticks, or at the ticks of at while any remain, and fires it
// at the ticks of fireAt.
type item struct {
	Entry[item]

	// under the wheel's lock
	every  uint64
	at     []uint64
	fireAt map[uint64]bool
	checks []uint64

	fire func(*item) // on the wheel's goroutine
}

func (it *item) Check(now uint64) (uint64, bool) {
	it.checks = append(it.checks, now)
	next := now + it.every
	if len(it.at) > 0 {
		next, it.at = it.at[0], it.at[1:]
	}
	return next, it.fireAt[now]
}

func (it *item) Fire() {
	if it.fire != nil {
		it.fire(it)
	}
}

// hour is a tick that never comes during a test: the tests that drive a
// wheel by hand call advance instead.
const hour = time.Hour

// advance counts ticks until w.Now() is to, as w's goroutine would, and
// returns the items fired, in order.
func advance(w *Wheel[item, *item], to uint64) []*item {
	var fired []*item
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.Now() < to {
		fired = w.advanceLocked(fired)
	}
	return fired
}

// checks returns the ticks it was checked at, under w's lock.
func checks(w *Wheel[item, *item], it *item) []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]uint64(nil), it.checks...)
}

func TestDueTimes(t *testing.T) {
	t.Parallel()
	w := newWheel[item](hour)
	require.Equal(t, uint64(1), w.Now(), "ticks count from 1")

	soon := &item{every: 5}
	now := &item{every: 1}
	far := &item{every: Slots + 10} // past a turn of the wheel: skipped when its slot comes round early
	w.Add(soon, 3)
	w.Add(now, 1)
	w.Add(far, 2*Slots+3)
	defer w.Remove(far)
	defer w.Remove(now)
	defer w.Remove(soon)

	require.Empty(t, advance(w, 3*Slots+20))
	require.Equal(t, []uint64{4, 9, 14, 19}, checks(w, soon)[:4])
	require.Len(t, checks(w, soon), (3*Slots+20-4)/5+1)
	require.Len(t, checks(w, now), 3*Slots+20-1, "checked at every tick from 2")
	require.Equal(t, []uint64{2*Slots + 4, 3*Slots + 14}, checks(w, far))
}

func TestReschedule(t *testing.T) {
	t.Parallel()
	w := newWheel[item](hour)
	it := &item{every: 2, at: []uint64{10, 200, 3}} // 3: in the past, taken as the next tick
	w.Add(it, 4)
	defer w.Remove(it)
	advance(w, 220)
	require.Equal(t, []uint64{5, 10, 200, 201, 203, 205}, checks(w, it)[:6])
}

func TestFire(t *testing.T) {
	t.Parallel()
	w := newWheel[item](hour)
	a := &item{every: 3, fireAt: map[uint64]bool{5: true, 11: true}}
	b := &item{every: 2, fireAt: map[uint64]bool{5: true}}
	w.Add(a, 1)
	w.Add(b, 2)
	defer w.Remove(b)
	defer w.Remove(a)
	fired := advance(w, 5)
	require.ElementsMatch(t, []*item{a, b}, fired, "both due at 5")
	require.Empty(t, advance(w, 10))
	require.Equal(t, []*item{a}, advance(w, 11))
}

// TestRemove: taking items out of a slot's list, at its head, in its
// middle or at its end, leaves the others scheduled.
func TestRemove(t *testing.T) {
	t.Parallel()
	w := newWheel[item](hour)
	var items []*item
	for range 5 {
		it := &item{every: Slots} // all in one slot, and back in it
		items = append(items, it)
		w.Add(it, 3)
	}
	// Added at the head: items[4] is first in the list, items[0] last.
	w.Remove(items[4])
	w.Remove(items[2])
	w.Remove(items[0])
	advance(w, 3*Slots+10)
	for i, it := range items {
		if i%2 == 0 {
			require.Empty(t, checks(w, it), "item %d was removed", i)
		} else {
			require.Equal(t, []uint64{4, 4 + Slots, 4 + 2*Slots, 4 + 3*Slots}, checks(w, it), "item %d", i)
		}
	}
	w.Remove(items[1])
	w.Remove(items[3])
	require.Zero(t, w.n)
	require.Nil(t, w.quit)
}

func TestTicks(t *testing.T) {
	t.Parallel()
	w := newWheel[item](250 * time.Millisecond)
	require.Equal(t, 250*time.Millisecond, w.Tick())
	require.Equal(t, uint64(4), w.Ticks(time.Second))
	require.Equal(t, uint64(5), w.Ticks(time.Second+time.Nanosecond), "rounded up")
	require.Equal(t, uint64(1), w.Ticks(time.Millisecond))
}

type other struct{ Entry[other] }

func (*other) Check(now uint64) (uint64, bool) { return now + 1, false }
func (*other) Fire()                           {}

func TestFor(t *testing.T) {
	t.Parallel()
	a := For[item](3 * time.Millisecond)
	require.Same(t, a, For[item](3*time.Millisecond), "one wheel per tick")
	require.NotSame(t, a, For[item](4*time.Millisecond))
	require.Equal(t, 3*time.Millisecond, For[other](3*time.Millisecond).Tick(), "and per item type")
}

// running counts the wheels' goroutines in the process.
func running() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "wheel.(*Wheel[...]).run(") {
			n++
		}
	}
	return n
}

// waitRunning waits, up to 5 s, until n wheel goroutines run.
func waitRunning(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for running() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d wheel goroutines run, want %d", running(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGoroutine: a wheel's goroutine runs while it holds items, ticks, and
// ends with the last item; the next Add starts it again. Not parallel: it
// counts the process's wheel goroutines.
func TestGoroutine(t *testing.T) {
	w := newWheel[item](time.Millisecond)
	waitRunning(t, 0)

	fired := make(chan *item, 100)
	send := func(it *item) {
		select {
		case fired <- it:
		default:
		}
	}
	a := &item{every: 1, fireAt: map[uint64]bool{3: true}, fire: send}
	b := &item{every: 1}
	w.Add(a, 1)
	w.Add(b, 1)
	waitRunning(t, 1)
	require.Equal(t, a, <-fired)
	w.Remove(a)
	waitRunning(t, 1)
	w.Remove(b)
	waitRunning(t, 0)

	// Stopped: no tick is counted while no item is held.
	stopped := w.Now()
	time.Sleep(10 * time.Millisecond)
	require.Equal(t, stopped, w.Now())

	// The next item starts it again, and the ticks go on from there.
	c := &item{every: 1, fireAt: map[uint64]bool{stopped + 2: true}, fire: send}
	w.Add(c, 1)
	waitRunning(t, 1)
	require.Equal(t, c, <-fired)
	require.Equal(t, stopped+1, checks(w, c)[0])
	w.Remove(c)
	waitRunning(t, 0)
}

// TestRemoveWhileFiring: Fire may remove items, its own as well, the last
// one too: the goroutine then ends after the tick's other Fires, and an Add
// meanwhile starts a new one, which alone counts the ticks.
func TestRemoveWhileFiring(t *testing.T) {
	w := newWheel[item](time.Millisecond)
	waitRunning(t, 0)

	var once sync.Once
	removed := make(chan struct{})
	b := &item{every: 1}
	a := &item{every: 1}
	a.fireAt = map[uint64]bool{3: true}
	a.fire = func(it *item) {
		once.Do(func() {
			w.Remove(b)
			w.Remove(a) // the last: the goroutine is told to stop
			c := &item{every: 1}
			w.Add(c, 1) // and a new one starts
			time.Sleep(5 * time.Millisecond)
			w.Remove(c)
			close(removed)
		})
	}
	w.Add(a, 1)
	w.Add(b, 1)
	<-removed
	waitRunning(t, 0)
	require.Zero(t, w.n)
	for s := range w.slots {
		require.Nil(t, w.slots[s], "slot %d", s)
	}
}
