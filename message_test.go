package gust

import (
	"fmt"
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

// TestMessageSizes: every message received costs a fresh Message, so its
// size is garbage-collector work per message; a slab fills a size class.
func TestMessageSizes(t *testing.T) {
	t.Parallel()
	require.Equal(t, uintptr(40), unsafe.Sizeof(Message{}))
	require.Equal(t, uintptr(1248), unsafe.Sizeof(messageSlab{}), "31 Messages and the index: the 1,280-byte size class")
}
