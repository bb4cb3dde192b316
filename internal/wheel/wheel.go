// Package wheel is a timing wheel shared by the whole process: items due at
// a tick, counted in ticks of a fixed length, with one goroutine per tick
// length that runs only while its wheel holds items, instead of a timer or
// a goroutine per item.
//
// A wheel holds its items in Slots doubly linked lists, each item in the
// slot of the tick at which it is next due; each tick, the goroutine looks
// at the items of one slot only. The item decides what being due means: the
// wheel calls its Check method, which says when it is due next and whether
// to Fire it once the wheel's lock is released.
package wheel

import (
	"sync"
	"sync/atomic"
	"time"
)

// Slots is the number of slots in a wheel. An item due more than Slots
// ticks ahead is skipped when its slot comes round early.
const Slots = 64

// Entry is an item's place in a wheel: T embeds it, which gives *T the
// WheelEntry method that Item asks for. Its zero value is an item in no
// wheel; an item is in one wheel at most.
type Entry[T any] struct {
	prev, next *T     // in the slot of due, under the wheel's mu
	due        uint64 // the tick of the next Check, under the wheel's mu
}

// WheelEntry returns e, so that a type embedding an Entry is an Item.
func (e *Entry[T]) WheelEntry() *Entry[T] { return e }

// Item is what a Wheel holds: a pointer to a T that embeds an Entry[T].
type Item[T any] interface {
	*T
	WheelEntry() *Entry[T]

	// Check is called on the wheel's goroutine, under the wheel's lock, at
	// the tick now at which the item is due. It returns the tick at which
	// it is due next (an earlier tick than now+1 is taken as now+1) and
	// whether to Fire it. It must not wait, nor call the wheel's methods.
	Check(now uint64) (next uint64, fire bool)

	// Fire is called on the wheel's goroutine once the lock is released,
	// for the items Check asked it for; it must not wait for long, since
	// the tick's other items wait for it. The item may have been removed
	// meanwhile.
	Fire()
}

// Wheel is a timing wheel, shared by the items whose ticks have the same
// length: get it with For. Its methods may be called concurrently.
type Wheel[T any, P Item[T]] struct {
	tick time.Duration
	now  atomic.Uint64 // ticks counted, from 1

	mu    sync.Mutex
	slots [Slots]P      // heads of doubly linked lists through Entry.prev and next
	n     int           // items held
	quit  chan struct{} // closed to stop the goroutine; nil when none runs
}

// key is a wheels.m key: a tick length, for the items of type T.
type key[T any] struct{ tick time.Duration }

// wheels holds a wheel per item type and tick length in use, for the life
// of the process (a wheel without items holds no goroutine and under 600
// bytes), so that every item with the same tick length shares one
// goroutine.
var wheels struct {
	mu sync.Mutex
	m  map[any]any // key[T] to *Wheel[T, P]
}

// For returns the wheel of items of type T whose ticks last tick, made on
// first use.
func For[T any, P Item[T]](tick time.Duration) *Wheel[T, P] {
	wheels.mu.Lock()
	defer wheels.mu.Unlock()
	k := key[T]{tick}
	if w, ok := wheels.m[k]; ok {
		return w.(*Wheel[T, P])
	}
	if wheels.m == nil {
		wheels.m = make(map[any]any)
	}
	w := newWheel[T, P](tick)
	wheels.m[k] = w
	return w
}

// newWheel returns a wheel of its own, which no other For shares.
func newWheel[T any, P Item[T]](tick time.Duration) *Wheel[T, P] {
	w := &Wheel[T, P]{tick: tick}
	w.now.Store(1) // so that 0 can mean "no tick" to the items
	return w
}

// Tick returns the length of w's ticks.
func (w *Wheel[T, P]) Tick() time.Duration { return w.tick }

// Now returns the ticks w has counted: 1 when it was made, never 0. It is
// one atomic load, for hot paths.
func (w *Wheel[T, P]) Now() uint64 { return w.now.Load() }

// Ticks returns d in w's ticks, rounded up.
func (w *Wheel[T, P]) Ticks(d time.Duration) uint64 {
	return uint64((d + w.tick - 1) / w.tick)
}

// Add puts item in w, due after ticks from now, and starts w's goroutine
// if item is the first.
func (w *Wheel[T, P]) Add(item P, after uint64) {
	w.mu.Lock()
	item.WheelEntry().due = w.now.Load() + after
	w.insertLocked(item)
	w.n++
	if w.quit == nil {
		w.quit = make(chan struct{})
		go w.run(w.quit)
	}
	w.mu.Unlock()
}

// Remove takes item out of w, which it must be in, and stops w's goroutine
// if item was the last. Check is not called on item after Remove returns;
// Fire may be, once, if the tick had already begun.
func (w *Wheel[T, P]) Remove(item P) {
	w.mu.Lock()
	w.removeLocked(item)
	w.n--
	if w.n == 0 {
		close(w.quit)
		w.quit = nil
	}
	w.mu.Unlock()
}

// run is w's goroutine: it advances w each tick until quit is closed.
func (w *Wheel[T, P]) run(quit chan struct{}) {
	t := time.NewTicker(w.tick)
	defer t.Stop()
	var fire []P // the items a tick fires, once w.mu is released; this goroutine's own
	for {
		select {
		case <-quit:
			return
		case <-t.C:
		}
		w.mu.Lock()
		if w.quit != quit {
			// Stopped, and maybe started again, while this tick waited
			// for the lock: the new goroutine counts the ticks.
			w.mu.Unlock()
			return
		}
		fire = w.advanceLocked(fire)
		w.mu.Unlock()
		for i, item := range fire {
			item.Fire()
			fire[i] = nil
		}
		fire = fire[:0]
	}
}

// advanceLocked counts a tick, checks the items due at it, moves each to
// the slot of its next check, and appends those to fire to fire.
func (w *Wheel[T, P]) advanceLocked(fire []P) []P {
	t := w.now.Add(1)
	for item := w.slots[t%Slots]; item != nil; {
		e := item.WheelEntry()
		next := P(e.next)
		if e.due <= t {
			w.removeLocked(item)
			due, f := item.Check(t)
			e.due = max(due, t+1)
			if f {
				fire = append(fire, item)
			}
			w.insertLocked(item)
		}
		item = next
	}
	return fire
}

func (w *Wheel[T, P]) insertLocked(item P) {
	e := item.WheelEntry()
	head := &w.slots[e.due%Slots]
	e.prev, e.next = nil, (*T)(*head)
	if *head != nil {
		(*head).WheelEntry().prev = item
	}
	*head = item
}

func (w *Wheel[T, P]) removeLocked(item P) {
	e := item.WheelEntry()
	if e.prev != nil {
		P(e.prev).WheelEntry().next = e.next
	} else {
		w.slots[e.due%Slots] = P(e.next)
	}
	if e.next != nil {
		P(e.next).WheelEntry().prev = e.prev
	}
	e.prev, e.next = nil, nil
}
