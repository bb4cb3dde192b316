package gust

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/stretchr/testify/require"
)

// TestMessageCloseTwice closes a message twice, then keeps the next two:
// each must have its own, intact bytes. When Close put the Message back
// into a pool, the second Close put it back twice, and the next two
// messages came out as one.
func TestMessageCloseTwice(t *testing.T) {
	t.Parallel()
	forEachFrameMode(t, func(t *testing.T, m serverMode) {
		h := newRecorder()
		kept := make(chan *Message, 2)
		h.message = func(_ *Conn, msg *Message) {
			if string(msg.Data) == "closed twice" {
				msg.Close()
				msg.Close()
				require.Nil(t, msg.Data)
				return
			}
			kept <- msg
		}
		c := dialRaw(t, m.start(t, h, nil), nil)
		// Several rounds: under the race detector sync.Pool drops a
		// quarter of what it is given, which would hide the old bug in a
		// single round.
		for round := range 20 {
			first, second := fmt.Sprintf("first %d", round), fmt.Sprintf("second message %d", round)
			c.send(frame(0x81, []byte("closed twice")), frame(0x82, []byte(first)), frame(0x81, []byte(second)))
			m1, m2 := <-kept, <-kept
			require.Equal(t, OpBinary, m1.Opcode)
			require.Equal(t, first, string(m1.Data))
			require.Equal(t, OpText, m2.Opcode)
			require.Equal(t, second, string(m2.Data))
			require.NotSame(t, m1, m2)
			m1.Close()
			m2.Close()
		}
	})
}

// TestMessageLateClose closes a message again after later messages took
// buffers from the pool, and its slab went back to the pool between reads:
// their bytes must not move.
func TestMessageLateClose(t *testing.T) {
	t.Parallel()
	var rd readState
	a := rd.newMessage(OpText, bufpool.Get(5), 5)
	copy(a.Data, "first")
	a.Close()
	rd.putSlab()                                  // as before the next read
	b := rd.newMessage(OpText, bufpool.Get(6), 6) // may reuse a's buffer and slab
	require.NotSame(t, a, b, "a Message is never handed out twice")
	copy(b.Data, "second")
	a.Close() // the owner of a, again: nothing to give back
	c := rd.newMessage(OpText, bufpool.Get(6), 6)
	copy(c.Data, "third!")
	require.Equal(t, "second", string(b.Data))
	require.Equal(t, "third!", string(c.Data))
	b.Close()
	c.Close()
}

// TestMessageRecycle: a Message its handler closed before returning
// carries the next message of the connection (readState.recycle), so that
// the usual defer m.Close() allocates nothing; one still open, or not the
// last handed out, is left alone.
func TestMessageRecycle(t *testing.T) {
	t.Parallel()
	var rd readState
	a := rd.newMessage(OpText, bufpool.Get(3), 3)
	a.Close()
	rd.recycle(a)
	b := rd.newMessage(OpBinary, bufpool.Get(4), 4)
	require.True(t, a == b, "closed by its handler: reused")
	require.False(t, b.closed.Load(), "the reused Message is open")
	require.Len(t, b.Data, 4)
	require.Equal(t, OpBinary, b.Opcode)

	rd.recycle(b) // still open: the handler keeps it
	c := rd.newMessage(OpText, bufpool.Get(5), 5)
	require.True(t, b != c, "a kept Message is not reused")
	b.Close()
	rd.recycle(b) // closed late, and no longer the last handed out
	d := rd.newMessage(OpText, bufpool.Get(6), 6)
	require.True(t, d != b && d != c)
	b.Close() // a late second Close reaches nothing
	require.Len(t, c.Data, 5)
	require.Len(t, d.Data, 6)
	c.Close()
	d.Close()
	rd.putSlab()
}

// TestMessageKeptNeverReused: over a connection whose handler closes every
// message but one, which it keeps, the kept Message is never handed out
// again, its bytes stay put while later messages come and go (more than a
// slab's 31), and its late double Close gives back only its own buffer.
func TestMessageKeptNeverReused(t *testing.T) {
	t.Parallel()
	forEachFrameMode(t, func(t *testing.T, mode serverMode) {
		h := newRecorder()
		seen := make(chan uintptr, 64)
		kept := make(chan *Message, 1)
		h.message = func(_ *Conn, m *Message) {
			if string(m.Data) == "keep" {
				kept <- m
				return
			}
			defer m.Close()
			m.Close() // twice within the handler: harmless
			seen <- uintptr(unsafe.Pointer(m))
		}
		c := dialRaw(t, mode.start(t, h, nil), nil)
		frames := [][]byte{frame(0x82, []byte("keep"))}
		for i := range 40 {
			frames = append(frames, frame(0x81, fmt.Appendf(nil, "later %d", i)))
		}
		c.send(frames...)
		k := <-kept
		for range 40 {
			require.NotEqual(t, uintptr(unsafe.Pointer(k)), <-seen, "a kept Message is never reused")
		}
		require.Equal(t, "keep", string(k.Data))
		require.Equal(t, OpBinary, k.Opcode)
		k.Close()
		k.Close()
		c.send(frame(0x81, []byte("after")), frame(0x81, []byte("and after")))
		for range 2 {
			require.NotEqual(t, uintptr(unsafe.Pointer(k)), <-seen)
		}
	})
}

// TestReceiveAllocatesNothing: a server reading 1 KiB messages whose
// handler closes each allocates nothing per message (a Message slab and
// buffers now and then, not per message).
func TestReceiveAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("SKIP: allocation counts mean nothing under -race (sync.Pool drops items); scripts/gotest runs the AllocatesNothing tests without it")
	}
	const n = 20000
	f := frame(0x82, repeat("a", 1024))
	c := newConn(newStreamConn(f, n), newConfig(Options{}, true), discardHandler{}, true, nil, "")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c.ReadLoop()
	runtime.ReadMemStats(&after)
	allocs := after.Mallocs - before.Mallocs
	require.Less(t, allocs, uint64(n/100), "%d allocations for %d messages", allocs, n)
}

// TestMessageCloseConcurrently closes one message from several goroutines
// at once: the buffer goes back once (the race detector watches).
func TestMessageCloseConcurrently(t *testing.T) {
	t.Parallel()
	m := new(readState).newMessage(OpBinary, bufpool.Get(64), 64)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Close()
		}()
	}
	wg.Wait()
	require.Nil(t, m.Data)
	require.Nil(t, m.buf)
}

// TestMessageSizes: every message kept past its handler costs a fresh
// Message, so its size is garbage-collector work per message; a slab fills
// a size class.
func TestMessageSizes(t *testing.T) {
	t.Parallel()
	require.Equal(t, uintptr(40), unsafe.Sizeof(Message{}))
	require.Equal(t, uintptr(1248), unsafe.Sizeof(messageSlab{}), "31 Messages and the index: the 1,280-byte size class")
}
