// Package pingwait holds the Pings of a connection that wait for their
// pongs, keyed by the payload of their ping: an 8-byte counter, so that
// several may wait at once, each for its own pong. It knows nothing of
// frames or connections: the caller sends the pings and hands it the
// payload of every pong.
package pingwait

import (
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// PayloadSize is the size of the payload of a ping sent by Ping: a
// counter that tells its pong from the others.
const PayloadSize = 8

// Set holds the Pings waiting for their pongs; its waiters are nil until
// the first Ping, so that a connection that never pings pays 8 bytes for
// it. The zero Set is ready to use.
type Set struct{ p atomic.Pointer[waiters] }

// ended is the set of a connection that ended before any Ping.
var ended = &waiters{ended: true}

// Add registers ch, which must have room for one value, and returns the
// payload of its ping; ok is false once the connection has ended. ch then
// receives the time the pong came, or is closed by End.
func (s *Set) Add(ch chan<- time.Time) (p [PayloadSize]byte, ok bool) {
	w := s.p.Load()
	if w == nil {
		s.p.CompareAndSwap(nil, new(waiters))
		w = s.p.Load()
	}
	id, ok := w.add(ch)
	if ok {
		binary.BigEndian.PutUint64(p[:], id)
	}
	return p, ok
}

// Remove forgets the Ping of payload p, which gave up waiting.
func (s *Set) Remove(p [PayloadSize]byte) {
	if w := s.p.Load(); w != nil {
		w.remove(binary.BigEndian.Uint64(p[:]))
	}
}

// Pong hands the time a pong with payload p arrived to the Ping waiting
// for it, if any; the read goroutine calls it for every pong.
func (s *Set) Pong(p []byte) {
	if w := s.p.Load(); w != nil {
		w.pong(p)
	}
}

// End wakes every waiting Ping with a closed channel, and makes later Adds
// fail at once; the connection calls it when it ends. Twice is harmless.
func (s *Set) End() {
	if !s.p.CompareAndSwap(nil, ended) {
		s.p.Load().end()
	}
}

// Waiting returns the number of Pings waiting for their pongs.
func (s *Set) Waiting() int {
	w := s.p.Load()
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.wait)
}

// waiters is a Set once a Ping has come.
type waiters struct {
	mu    sync.Mutex
	next  uint64                      // the payload of the next ping
	wait  map[uint64]chan<- time.Time // by payload; each channel has room for one value
	ended bool                        // the connection has ended: no more waiters
}

// add registers ch and returns the payload of its ping; ok is false once
// the connection has ended.
func (w *waiters) add(ch chan<- time.Time) (id uint64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return 0, false
	}
	if w.wait == nil {
		w.wait = make(map[uint64]chan<- time.Time)
		w.next = rand.Uint64() // so that unsolicited pongs are unlikely to match
	}
	id = w.next
	w.next++
	w.wait[id] = ch
	return id, true
}

func (w *waiters) remove(id uint64) {
	w.mu.Lock()
	delete(w.wait, id)
	w.mu.Unlock()
}

func (w *waiters) pong(p []byte) {
	if len(p) != PayloadSize {
		return
	}
	id := binary.BigEndian.Uint64(p)
	w.mu.Lock()
	if ch, ok := w.wait[id]; ok {
		delete(w.wait, id)
		ch <- time.Now() // never blocks: room for one, and one send per channel
	}
	w.mu.Unlock()
}

func (w *waiters) end() {
	w.mu.Lock()
	w.ended = true
	for _, ch := range w.wait {
		close(ch)
	}
	w.wait = nil
	w.mu.Unlock()
}
