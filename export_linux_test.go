package gust

import (
	"net"
	"testing"

	"github.com/gustws/gust/internal/netpoll"
	"github.com/stretchr/testify/require"
)

// The hooks production code calls on Linux, nil unless a test sets them.

// hookPark has f called by each connection that parks, with whether it
// keeps its read state, until the test ends.
func hookPark(t testing.TB, f func(c *Conn, holdsRead bool)) {
	parkHook.Store(&f)
	t.Cleanup(func() { parkHook.Store(nil) })
}

// hookDup has f called before each connection's descriptor is duplicated,
// an error it returns failing the duplication as the descriptor limit
// would, until unhook is called or the test ends.
func hookDup(t testing.TB, f func(c *Conn) error) (unhook func()) {
	dupHook.Store(&f)
	unhook = func() { dupHook.Store(nil) }
	t.Cleanup(unhook)
	return unhook
}

// A Conn closed before its ReadLoop ran (a client that dials and gives up)
// leaves its event loop at once: no slot, and no loop kept running for it.
func TestNetpollConnClosedBeforeReadLoopLeavesItsLoop(t *testing.T) {
	server, _ := tcpPair(t)
	c := newConn(server, newConfig(Options{Netpoll: true}, true), nil, true, nil, "")
	require.NotNil(t, c.sock())
	require.True(t, c.sock().InLoop(), "registered with its loop from the start")
	require.NoError(t, c.CloseNow())
	require.False(t, c.sock().InLoop())
	raw, err := c.sock().SyscallConn()
	require.NoError(t, err)
	require.ErrorIs(t, raw.Control(func(uintptr) {}), net.ErrClosed, "the socket is closed")
}

// pollerConns returns how many connections gust's event loops hold
// (netpoll mode). The tests that check a connection leaves nothing behind
// ask it, so that this is the one place in the tests that knows how the
// loops keep their connections.
func pollerConns() int { return netpoll.Conns() }
