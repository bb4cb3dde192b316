package gust

import "github.com/gustws/gust/internal/deflate"

// permessage-deflate itself, the negotiation and a connection's
// compression state, is in internal/deflate; what is here maps the
// library's types onto it.

// CompressionOptions configures permessage-deflate (RFC 7692). The zero
// value turns compression off. Each field means the same on both sides:
// the plain fields are about the messages this side sends, the Peer fields
// are what this side asks of the peer's messages.
type CompressionOptions struct {
	// Enabled offers (client) or accepts (server) permessage-deflate.
	// Default false.
	Enabled bool

	// Level is the flate level for messages this side sends, from 1
	// (fastest) to 9 (smallest). Default 1. Memory: a compressor is
	// 0.8–1.4 MiB once used (800 KiB at level 1); with context takeover a
	// busy connection holds one
	// between messages only within a process-wide budget (8 per
	// GOMAXPROCS, at least 16), and the others keep the last 2 KiB they
	// sent instead; compressors are pooled otherwise.
	Level int

	// Threshold is the size below which messages go out uncompressed.
	// Default 512 bytes.
	Threshold int

	// NoContextTakeover starts each message this side sends with an empty
	// window, so that no compressor is held between messages (memory) at
	// the cost of ratio. Default false; the peer may still ask for it, and
	// then it applies.
	NoContextTakeover bool

	// PeerNoContextTakeover asks the peer to start each of its messages with
	// an empty window, so that this side keeps no window for reading them.
	// A client whose server does not agree fails the handshake; a server
	// makes it a condition of accepting. Default false.
	PeerNoContextTakeover bool

	// WindowBits bounds the LZ77 window of messages this side sends, as a
	// power of two from 8 to 15. Default 15 (32 KiB).
	WindowBits int

	// PeerWindowBits asks the peer to bound the window of its messages, so
	// that this side keeps 2^PeerWindowBits bytes for reading them. A
	// client whose server answers with a larger one fails the handshake. A
	// server can ask only a client that offered client_max_window_bits
	// (gust's always does); for one that did not, it keeps 32 KiB.
	// Default 15 (32 KiB).
	PeerWindowBits int
}

// rfc returns o as the server (server true) or the client sees it, with
// the defaults filled in: the parameters named from each side, as RFC 7692
// names them.
func (o CompressionOptions) rfc(server bool) deflate.Config {
	c := deflate.Config{Enabled: o.Enabled, Level: o.Level, Threshold: o.Threshold}
	if server {
		c.ServerNoContextTakeover, c.ClientNoContextTakeover = o.NoContextTakeover, o.PeerNoContextTakeover
		c.ServerMaxWindowBits, c.ClientMaxWindowBits = o.WindowBits, o.PeerWindowBits
	} else {
		c.ClientNoContextTakeover, c.ServerNoContextTakeover = o.NoContextTakeover, o.PeerNoContextTakeover
		c.ClientMaxWindowBits, c.ServerMaxWindowBits = o.WindowBits, o.PeerWindowBits
	}
	return c.WithDefaults()
}

// inflateError is the close that an error of deflate.State.Inflate calls
// for: 1009 for a message over the limit, 1007 for bad text or bad deflate
// data.
func inflateError(err error) error {
	switch err {
	case deflate.ErrTooBig:
		return protocolError(StatusMessageTooBig, "message over the size limit once inflated")
	case deflate.ErrText:
		return protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
	case deflate.ErrData:
		return protocolError(StatusInvalidFramePayloadData, "invalid deflate data")
	}
	return err
}
