package gust

// Event receives what happens on a connection. Its methods are called from
// the goroutine that runs [Conn.ReadLoop], one at a time (unless
// [Options.Parallel] is set, which moves OnMessage calls to a bounded
// set of short-lived goroutines).
//
// The lifecycle is: OnOpen once; OnMessage, OnPing and OnPong any number of
// times; OnClose exactly once, last, whatever ended the connection. After
// OnClose no other method is called for that connection.
type Event interface {
	// OnOpen is called once, when ReadLoop starts.
	OnOpen(c *Conn)

	// OnClose is called once, when the connection has ended. err is a
	// *CloseError when close frames were exchanged (the peer's code and
	// reason, and who started); a *ProtocolError when gust failed the
	// connection because the peer broke the protocol or a limit (the code
	// gust sent); a *PanicError when a callback panicked (gust closed with
	// 1011); ErrServerClosed when a Server or an Upgrader cut it (one cut
	// before its ReadLoop started gets OnClose without OnOpen); an error
	// wrapping os.ErrDeadlineExceeded when a write made no progress for
	// Options.WriteTimeout, or net.ErrClosed after CloseNow; the I/O error
	// otherwise (EOF, a reset, a read deadline).
	OnClose(c *Conn, err error)

	// OnPing is called for each ping frame. p is only valid until OnPing
	// returns. A handler should answer with c.WritePong(p), as
	// BuiltinEventHandler does (RFC 6455 §5.5.3).
	OnPing(c *Conn, p []byte)

	// OnPong is called for each pong frame. p is only valid until OnPong
	// returns.
	OnPong(c *Conn, p []byte)

	// OnMessage is called for each complete data message. The message and
	// its Data belong to the handler: call m.Close when done with it to give
	// its buffer back to the pool (not calling Close is safe, just slower).
	// A message closed before OnMessage returns is gust's once it returns,
	// and may carry the connection's next message: with defer m.Close(),
	// receiving allocates nothing.
	// With Options.StreamThreshold, a large message is handed over as soon
	// as it outgrows the threshold, as a stream read with m.Read until
	// OnMessage returns (see Message.Read).
	OnMessage(c *Conn, m *Message)
}

// BuiltinEventHandler implements every Event method. Embed it to implement
// only the methods you need. Its OnPing answers with a pong carrying the same
// payload, as RFC 6455 §5.5.3 requires; its OnMessage releases the message.
type BuiltinEventHandler struct{}

// OnOpen does nothing.
func (BuiltinEventHandler) OnOpen(*Conn) {}

// OnClose does nothing.
func (BuiltinEventHandler) OnClose(*Conn, error) {}

// OnPing answers with a pong that carries the same payload. A write error
// ends the connection, and so reaches OnClose.
func (BuiltinEventHandler) OnPing(c *Conn, p []byte) { c.WritePong(p) }

// OnPong does nothing.
func (BuiltinEventHandler) OnPong(*Conn, []byte) {}

// OnMessage releases the message.
func (BuiltinEventHandler) OnMessage(_ *Conn, m *Message) { m.Close() }
