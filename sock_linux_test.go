package gust

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

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
