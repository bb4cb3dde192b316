package deflate

import (
	"net/http"
	"testing"

	"github.com/gustws/gust/internal/handshake"
	"github.com/stretchr/testify/require"
)

func TestNegotiate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		offer  string
		server Config
		want   string // "" when declined
	}{
		{"permessage-deflate", Config{}, "permessage-deflate"},
		{"permessage-deflate; client_max_window_bits", Config{}, "permessage-deflate"},
		{"permessage-deflate; client_max_window_bits", Config{ClientMaxWindowBits: 10}, "permessage-deflate; client_max_window_bits=10"},
		// ClientMaxWindowBits binds only a client that offered
		// client_max_window_bits: without it, the server keeps 32 KiB.
		{"permessage-deflate", Config{ClientMaxWindowBits: 10}, "permessage-deflate"},
		{"permessage-deflate; client_max_window_bits=9", Config{}, "permessage-deflate; client_max_window_bits=9"},
		{"permessage-deflate; server_max_window_bits=8", Config{}, "permessage-deflate; server_max_window_bits=8"},
		// An offered server_max_window_bits is always answered (RFC 7692
		// §7.1.2.1), with the same value or a smaller one.
		{"permessage-deflate; server_max_window_bits=15", Config{}, "permessage-deflate; server_max_window_bits=15"},
		{"permessage-deflate; server_max_window_bits=14", Config{}, "permessage-deflate; server_max_window_bits=14"},
		{"permessage-deflate; server_max_window_bits=15", Config{ServerMaxWindowBits: 10}, "permessage-deflate; server_max_window_bits=10"},
		{"permessage-deflate; server_max_window_bits=9", Config{ServerMaxWindowBits: 12}, "permessage-deflate; server_max_window_bits=9"},
		{"permessage-deflate; server_max_window_bits=15; client_max_window_bits", Config{},
			"permessage-deflate; server_max_window_bits=15"},
		{"permessage-deflate; client_max_window_bits=15; server_max_window_bits=15", Config{ServerNoContextTakeover: true},
			"permessage-deflate; server_no_context_takeover; server_max_window_bits=15"},
		{"permessage-deflate", Config{ServerMaxWindowBits: 12}, "permessage-deflate; server_max_window_bits=12"},
		{"permessage-deflate; server_no_context_takeover; client_no_context_takeover", Config{},
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover"},
		{"permessage-deflate", Config{ServerNoContextTakeover: true, ClientNoContextTakeover: true},
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover"},
		// Declined offers: the next acceptable one wins.
		{"permessage-deflate; server_max_window_bits=7, permessage-deflate", Config{}, "permessage-deflate"},
		{"permessage-deflate; server_max_window_bits", Config{}, ""},
		{"permessage-deflate; server_max_window_bits=16", Config{}, ""},
		{"permessage-deflate; server_max_window_bits=010", Config{}, ""},
		{"permessage-deflate; client_max_window_bits=x", Config{}, ""},
		{"permessage-deflate; server_no_context_takeover=1", Config{}, ""},
		{"permessage-deflate; unknown=1", Config{}, ""},
		{"permessage-deflate; server_no_context_takeover; server_no_context_takeover", Config{}, ""},
		{"x-webkit-deflate-frame", Config{}, ""},
		{`permessage-deflate; client_max_window_bits="10"`, Config{}, "permessage-deflate; client_max_window_bits=10"},
	}
	for _, tt := range tests {
		offers, err := handshake.Extensions(http.Header{"Sec-Websocket-Extensions": {tt.offer}})
		require.NoError(t, err, tt.offer)
		tt.server.Enabled = true
		c := tt.server.WithDefaults()
		p, ok := Negotiate(offers, &c)
		if tt.want == "" {
			require.False(t, ok, tt.offer)
			continue
		}
		require.True(t, ok, tt.offer)
		require.Equal(t, tt.want, p.String(), tt.offer)
	}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	require.Equal(t, Config{Level: 1, Threshold: 512, ServerMaxWindowBits: 15, ClientMaxWindowBits: 15}, Config{}.WithDefaults())
	require.Equal(t, Config{Level: 1, Threshold: 512, ServerMaxWindowBits: 15, ClientMaxWindowBits: 15},
		Config{Level: 10, Threshold: -1, ServerMaxWindowBits: 7, ClientMaxWindowBits: 16}.WithDefaults())
	in := Config{Enabled: true, Level: 9, Threshold: 1, ServerNoContextTakeover: true, ClientNoContextTakeover: true,
		ServerMaxWindowBits: 8, ClientMaxWindowBits: 14}
	require.Equal(t, in, in.WithDefaults())
}

// TestNegotiationAgrees runs every offer gust's client can make through
// the server's negotiation and back through the client's check: the client
// must accept every answer, and both sides must agree on each direction's
// window and context.
func TestNegotiationAgrees(t *testing.T) {
	t.Parallel()
	var clients, servers []Config
	for _, noCtx := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		for sb := MinWindowBits; sb <= MaxWindowBits; sb++ {
			for cb := MinWindowBits; cb <= MaxWindowBits; cb++ {
				clients = append(clients, Config{Enabled: true, ServerNoContextTakeover: noCtx[0],
					ClientNoContextTakeover: noCtx[1], ServerMaxWindowBits: sb, ClientMaxWindowBits: cb}.WithDefaults())
			}
		}
		for _, bits := range []int{9, 12, 15} {
			servers = append(servers, Config{Enabled: true, ServerNoContextTakeover: noCtx[0],
				ClientNoContextTakeover: noCtx[1], ServerMaxWindowBits: bits, ClientMaxWindowBits: 24 - bits}.WithDefaults())
		}
	}
	for _, co := range clients {
		offer := Offer(&co)
		offers, err := handshake.Extensions(http.Header{"Sec-Websocket-Extensions": {offer}})
		require.NoError(t, err)
		for _, so := range servers {
			sp, ok := Negotiate(offers, &so)
			require.True(t, ok, offer)
			answer := sp.String()
			cp, err := Accept(http.Header{"Sec-Websocket-Extensions": {answer}}, &co)
			require.NoError(t, err, "%s -> %s", offer, answer)
			server := NewState(sp, &so, true, nil)
			client := NewState(*cp, &co, false, nil)
			require.Equal(t, [2]int{server.writeBits, server.readBits}, [2]int{client.readBits, client.writeBits}, "%s -> %s", offer, answer)
			require.Equal(t, server.writeNoCtx, client.readNoCtx, "%s -> %s", offer, answer)
			// A client may drop its context unasked; the server must not
			// count on it unless it said so.
			require.True(t, !server.readNoCtx || client.writeNoCtx, "%s -> %s", offer, answer)
		}
	}
}

func TestOffer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		client Config
		want   string
	}{
		{Config{}, "permessage-deflate; client_max_window_bits"},
		{Config{ServerNoContextTakeover: true, ClientNoContextTakeover: true},
			"permessage-deflate; server_no_context_takeover; client_no_context_takeover; client_max_window_bits"},
		{Config{ServerMaxWindowBits: 9, ClientMaxWindowBits: 8},
			"permessage-deflate; server_max_window_bits=9; client_max_window_bits=8"},
	} {
		c := tc.client.WithDefaults()
		require.Equal(t, tc.want, Offer(&c))
		// The offer must be one a gust server accepts as it is.
		exts, err := handshake.Extensions(http.Header{"Sec-Websocket-Extensions": {tc.want}})
		require.NoError(t, err)
		srv := Config{Enabled: true}.WithDefaults()
		_, ok := Negotiate(exts, &srv)
		require.True(t, ok)
	}
}

// FuzzNegotiate offers arbitrary Sec-WebSocket-Extensions values to a
// server: an answer, when there is one, must be one that a gust client
// with the defaults accepts, and both sides must agree on each direction.
func FuzzNegotiate(f *testing.F) {
	for _, s := range []string{
		"permessage-deflate",
		"permessage-deflate; client_max_window_bits",
		"permessage-deflate; server_max_window_bits=9; client_max_window_bits=8",
		"permessage-deflate; server_no_context_takeover; client_no_context_takeover",
		`permessage-deflate; server_max_window_bits=7, permessage-deflate; client_max_window_bits="10"`,
		"x-webkit-deflate-frame, permessage-deflate; unknown=1",
	} {
		f.Add(s, false, 0, 0)
	}
	f.Add("permessage-deflate", true, 12, 9)
	f.Fuzz(func(t *testing.T, header string, noCtx bool, serverBits, clientBits int) {
		offers, err := handshake.Extensions(http.Header{"Sec-Websocket-Extensions": {header}})
		if err != nil {
			return // the server declines compression
		}
		so := Config{Enabled: true, ServerNoContextTakeover: noCtx, ServerMaxWindowBits: serverBits, ClientMaxWindowBits: clientBits}.WithDefaults()
		sp, ok := Negotiate(offers, &so)
		if !ok {
			return
		}
		require.True(t, sp.ServerMaxWindowBits >= MinWindowBits && sp.ServerMaxWindowBits <= so.ServerMaxWindowBits)
		require.True(t, sp.ClientMaxWindowBits >= MinWindowBits && sp.ClientMaxWindowBits <= MaxWindowBits)
		answer := sp.String()
		co := Config{Enabled: true}.WithDefaults()
		cp, err := Accept(http.Header{"Sec-Websocket-Extensions": {answer}}, &co)
		require.NoError(t, err, "%s -> %s", header, answer)
		server, client := NewState(sp, &so, true, nil), NewState(*cp, &co, false, nil)
		sw, sr := server.Directions()
		cw, cr := client.Directions()
		require.Equal(t, sw, cr, "%s -> %s", header, answer)
		require.Equal(t, sr.WindowBits, cw.WindowBits, "%s -> %s", header, answer)
		require.True(t, !sr.NoContextTakeover || cw.NoContextTakeover, "%s -> %s", header, answer)
	})
}
