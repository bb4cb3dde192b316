package gust

import (
	"strings"
	"sync"
	"testing"

	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

func TestPreparedMessageToMixedReceivers(t *testing.T) {
	t.Parallel()
	text := strings.Repeat(`{"topic":"prices","symbol":"GUST","bid":101.25,"ask":101.5}`, 20)
	pm, err := NewPreparedMessage(OpText, []byte(text))
	require.NoError(t, err)
	require.Equal(t, OpText, pm.Opcode())
	require.Equal(t, text, string(pm.Payload()))
	_, err = NewPreparedMessage(opPing, nil)
	require.Error(t, err)

	after := strings.Repeat("follow-up that refers back: ", 10) + text[:300]
	var mu sync.Mutex
	var conns []*Conn
	opened := make(chan struct{}, 10)
	h := newRecorder()
	h.open = func(c *Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		opened <- struct{}{}
	}
	addr := startServer(t, h, &Options{Compression: CompressionOptions{Enabled: true}})
	offers := []string{"", "permessage-deflate", "permessage-deflate; server_no_context_takeover",
		"permessage-deflate; server_max_window_bits=9"}
	var clients []*rawClient
	for _, o := range offers {
		var hdr []string
		if o != "" {
			hdr = append(hdr, "Sec-WebSocket-Extensions: "+o)
		}
		clients = append(clients, dialRaw(t, addr, nil, hdr...))
		<-opened
	}
	// Each connection first sends a message of its own (so that a kept
	// context exists), then the prepared one, then another of its own.
	mu.Lock()
	for _, c := range conns {
		require.NoError(t, c.WriteString(text))
		require.NoError(t, c.WritePrepared(pm))
		require.NoError(t, c.WritePrepared(pm))
		require.NoError(t, c.WriteString(after))
	}
	mu.Unlock()
	for i, c := range clients {
		dc := testkit.NewDeflatePeer()
		for _, want := range []string{text, text, text, after} {
			b0, p, err := c.readFrame()
			require.NoError(t, err)
			if offers[i] == "" {
				require.Equal(t, byte(0x81), b0)
				require.Equal(t, want, string(p))
				continue
			}
			require.Equal(t, byte(0xC1), b0, offers[i])
			require.Equal(t, want, string(dc.Decompress(t, p)), offers[i])
		}
	}
	require.Len(t, pm.compressed, 2, "compressed once per distinct window, not per receiver")
}

func BenchmarkWritePrepared1KiB(b *testing.B) {
	sc := newStreamConn(nil, 0)
	c := newConn(sc, newConfig(Options{}, true), discardHandler{}, true, nil, "")
	pm, _ := NewPreparedMessage(OpBinary, repeat("a", 1024))
	b.ReportAllocs()
	for b.Loop() {
		if err := c.WritePrepared(pm); err != nil {
			b.Fatal(err)
		}
	}
}
