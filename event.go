package gust

// Event receives what happens on a connection: OnOpen once, then OnMessage,
// OnPing and OnPong as frames arrive, and OnClose exactly once, last,
// whatever ended the connection. The methods are called one at a time from
// the goroutine that runs [Conn.ReadLoop] ([Options.Parallel] moves
// OnMessage calls to a few short-lived goroutines).
type Event interface {
	// OnOpen is called once, when ReadLoop starts.
	OnOpen(c *Conn)

	// OnClose is called once, when the connection has ended, with why: a
	// *CloseError when close frames were exchanged; a *ProtocolError when
	// the peer broke the protocol or a limit; a *PanicError when a callback
	// panicked; ErrServerClosed when a Server or an Upgrader cut it (before
	// its ReadLoop started, without OnOpen); an error wrapping
	// os.ErrDeadlineExceeded after a timeout, or net.ErrClosed after
	// CloseNow; else the I/O error (EOF, a reset, a read deadline).
	OnClose(c *Conn, err error)

	// OnPing is called for each ping; p is valid until it returns. It should
	// answer with c.WritePong(p), as BuiltinEventHandler does (RFC 6455
	// §5.5.3).
	OnPing(c *Conn, p []byte)

	// OnPong is called for each pong; p is valid until it returns.
	OnPong(c *Conn, p []byte)

	// OnMessage is called for each complete data message, which belongs to
	// the handler: m.Close gives its buffer back to the pool (not calling
	// it is safe, only slower). A message closed before OnMessage returns
	// may carry the connection's next one, so with defer m.Close() receiving
	// allocates nothing. With Options.StreamThreshold, a large message
	// comes as a stream, read with m.Read until OnMessage returns.
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
