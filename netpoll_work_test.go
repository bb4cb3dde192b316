//go:build linux

package gust

import (
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

// A connection's turn on an event loop is bounded by the work it does, not
// by its reads: a compressed message that inflates to megabytes, or many
// small ones that add up, are inflated and handled on a goroutine of the
// connection's own. The handler here holds every large message until the
// test ends; the other connections, some on the same loop, are served
// meanwhile.
func TestNetpollCompressedWorkLeavesTheLoop(t *testing.T) {
	cases := []struct {
		name     string
		messages [][]byte // sent at once, deflated
	}{
		// 16 MiB of zeros in about 16 KiB on the wire.
		{"one large", [][]byte{testkit.DeflateBomb(16 << 20)}},
		// 600 KiB each in under 1 KiB: the third passes the turn's budget.
		{"small ones adding up", [][]byte{testkit.DeflateBomb(600 << 10), testkit.DeflateBomb(600 << 10), testkit.DeflateBomb(600 << 10)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forEachNetpollMode(t, func(t *testing.T, m serverMode) {
				release := make(chan struct{})
				held := make(chan bool, len(tc.messages)) // whether each large message was handled on a loop
				h := newRecorder()
				h.opened = nil
				h.message = func(c *Conn, msg *Message) {
					defer msg.Close()
					if len(msg.Data) < 64<<10 {
						c.WriteMessage(msg.Opcode, msg.Data)
						return
					}
					held <- strings.Contains(string(debug.Stack()), "(*poller).loop")
					if len(held) == cap(held) || len(tc.messages) == 1 {
						<-release // a handler that takes long: on the loop it would hold up the others
					}
				}
				defer close(release)
				addr := m.start(t, h, &Options{MaxMessageSize: 32 << 20, Compression: CompressionOptions{Enabled: true}})
				others := make([]*rawClient, 8)
				for i := range others {
					others[i] = dialRaw(t, addr, nil)
				}
				big := dialRaw(t, addr, nil, "Sec-WebSocket-Extensions: permessage-deflate; client_no_context_takeover")
				var burst []byte
				for _, p := range tc.messages {
					require.Less(t, len(p), 32<<10)
					burst = append(burst, frame(0xC2, p)...)
				}
				big.send(burst)
				var onLoop bool
				for range tc.messages {
					select {
					case onLoop = <-held:
					case <-time.After(10 * time.Second):
						t.Fatal("the large messages were not dispatched")
					}
				}
				require.False(t, onLoop, "the last large message was handled on the event loop")
				echoRounds(t, others, 5, 3*time.Second)
			})
		})
	}
}
