//go:build linux

package gust

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

// runFuzzLoop is runFuzzConn in netpoll mode's event-loop parse: the input
// reaches a real socket in chunks, and after each chunk the parser runs as
// a loop runs it (c.rd.loop: it never waits) until it has nothing more to
// read (it yields park), so that every frame is parsed across as many resumptions
// as the chunks cut it into. Where the loop would hand the connection to a
// goroutine (handOff: a backlog; handOffEnd: a close frame), what is left
// of the read buffer is shrunk as serve does, the rest of the input is sent
// at once, and the connection is served as that goroutine serves it.
func runFuzzLoop(t *testing.T, in []byte, seed uint64, opts Options) (*fuzzRecorder, []byte) {
	nc, peer := testkit.UnixPair(t)
	defer peer.Close()
	out := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(peer)
		out <- b
	}()

	rng := rand.New(rand.NewPCG(seed, uint64(len(in))))
	steps := []int{1, 7, 64, 1024, 1 << 16}
	step := steps[seed%uint64(len(steps))]
	h := &fuzzRecorder{t: t}
	opts.MaxMessageSize = fuzzMaxMessage
	opts.DisableRecovery = true
	c := newConn(nc, newConfig(opts, true), h, true, nil, "")
	require.IsType(t, (*rawTransport)(nil), c.tr, "a Unix socket reads through its RawConn")
	c.started.Store(true)

	shut := false
	send := func(p []byte, last bool) {
		if len(p) > 0 {
			_, err := peer.Write(p)
			require.NoError(t, err)
		}
		if last && !shut {
			shut = true
			require.NoError(t, peer.(*net.UnixConn).CloseWrite())
		}
	}
	rest := in
	open := true
	for {
		c.rd.startTurn()
		y, err := c.run(open)
		open = false
		if y == park {
			n := min(len(rest), 1+rng.IntN(2*step))
			send(rest[:n], n == len(rest))
			rest = rest[n:]
			continue
		}
		c.rd.loop = false
		send(rest, true)
		if y == handOff || y == handOffEnd {
			c.rd.shrink()
			c.serveOffLoop()
		} else {
			c.rd.releaseAll()
			c.end(err)
		}
		break
	}
	require.Equal(t, 1, h.opens, "OnOpen calls")
	require.Equal(t, 1, h.closes, "OnClose calls")
	return h, <-out
}

// fuzzLoopAgrees checks that netpoll mode's loop parse of in ends as the
// goroutine mode's did (want, which wrote wantOut): the same messages,
// pings, frames written and error.
func fuzzLoopAgrees(t *testing.T, in []byte, seed uint64, opts Options, want *fuzzRecorder, wantOut []byte) {
	h, got := runFuzzLoop(t, in, seed, opts)
	require.Equal(t, want.msgs, h.msgs, "messages")
	require.Equal(t, want.msgBytes, h.msgBytes, "message bytes")
	require.Equal(t, want.pings, h.pings, "pings")
	require.True(t, bytes.Equal(wantOut, got), "frames written: goroutine mode % x, loop % x", wantOut, got)
	require.Equal(t, errString(want.err), errString(h.err), "OnClose error")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
