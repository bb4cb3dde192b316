// Package gust is a WebSocket library (RFC 6455, with permessage-deflate,
// RFC 7692) for API servers, push and chat backends.
//
// A connection is a [*Conn], the same type on every side: an [Upgrader]
// makes one inside a net/http handler, a [Server] makes them with its own
// accept loop and HTTP/1.1 handshake parser on any net.Listener, and [Dial]
// opens one as a client. Each Conn reports what happens to it to an [Event]
// handler, and [Conn.ReadLoop] reads the connection and calls that handler
// in the goroutine that calls it.
//
// # A server and a client
//
//	type echo struct{ gust.BuiltinEventHandler }
//
//	func (echo) OnMessage(c *gust.Conn, m *gust.Message) {
//		defer m.Close() // gives the message's buffer back to the pool
//		c.WriteMessage(m.Opcode, m.Data)
//	}
//
//	upgrader := &gust.Upgrader{Handler: echo{}}
//	http.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
//		c, err := upgrader.Upgrade(w, r) // on error, Upgrade has answered
//		if err != nil {
//			return
//		}
//		c.ReadLoop() // reads and dispatches until the connection ends
//	})
//
// Without net/http, the same handler serves from a Server:
//
//	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: echo{}}}
//	log.Fatal(srv.ListenAndServe(":8080"))
//
// A client dials, runs its ReadLoop in a goroutine of its own and writes:
//
//	c, _, err := gust.Dial(ctx, "wss://example.com/ws", handler, nil)
//	if err != nil {
//		return err // a *gust.HandshakeError
//	}
//	go c.ReadLoop()
//	err = c.WriteString("hello")
//
// The zero values of Upgrader, Server and [Options] are ready to use, and
// a nil [*DialOptions] means the defaults; set fields before first use.
// [Upgrader.OnRequest] sees every handshake request before it is answered,
// on both server paths, and may refuse it with a response of its own (a
// [*HandshakeError]) or attach data to the connection-to-be with
// [Conn.Set]. [Server.Shutdown] and [Upgrader.Shutdown] send close 1001 to
// every connection and wait for them; net/http's own Shutdown does not
// cover hijacked connections, so behind net/http call both. For a rolling
// restart, [Server.Drain] and [Upgrader.Drain] refuse new connections and
// spread their closes (1012) over a window, while [Server.Draining] tells
// a health route (ExampleServer_Drain).
//
// # Events
//
// An [Event] has five methods: OnOpen once, when ReadLoop starts;
// OnMessage, OnPing and OnPong as frames arrive; and OnClose exactly once,
// last, whatever ended the connection, with an error that says why: a
// [*CloseError] (read its code with [CloseStatus]), a [*ProtocolError], a
// [*PanicError], [ErrServerClosed], a timeout or the I/O error. Embed
// [BuiltinEventHandler] to write only the methods you need; its OnPing
// answers with a pong, as the RFC requires.
//
// The callbacks run one at a time, in the order the frames arrived, in the
// goroutine that runs ReadLoop; gust starts no goroutine per connection of
// its own. [Options.Parallel] moves OnMessage calls onto a few short-lived
// goroutines per connection, and order is then not kept.
//
// A [Message]'s Data sits in a pooled buffer that is the handler's until
// [Message.Close]: copy what you keep. With [Options.StreamThreshold], a
// large message reaches OnMessage as a stream, read with [Message.Read].
//
// # Writing
//
// Every write is safe from any goroutine, serialised inside the Conn:
// [Conn.WriteMessage], [Conn.WriteString], [Conn.WriteJSON],
// [Conn.WritePrepared] (a [PreparedMessage], framed once for many
// receivers) and [Conn.NextWriter] for a message sent in pieces. Writes
// made while the read goroutine dispatches one read's frames are corked
// and leave in one system call before the next read, so a callback that
// blocks delays them: hand slow work to a goroutine. [Conn.WriteAsync]
// queues in a bounded outbox and never waits for the socket
// (Options.OutboxPolicy says what a full one does). [Conn.Close] starts the
// closing handshake, [Conn.CloseNow] cuts the connection, and [Conn.Ping]
// measures a round trip from a goroutine other than the callbacks'. Writes
// on a connection that has ended return [net.ErrClosed].
//
// # Netpoll mode
//
// With [Options.Netpoll] (Linux), an idle connection holds no goroutine and
// no buffer: it is parked on one of gust's epoll event loops, which reads,
// parses and dispatches what arrives. ReadLoop then returns at the
// connection's first idle moment, so what belongs to the connection's end
// goes in OnClose, and the callbacks run on a loop shared by many
// connections, so they must not block. TLS goes to the loops when gust
// makes it ([Server.ServeTLS], wss:// Dials); other TLS, HTTP/2 streams and
// wrapped conns stay in goroutine mode.
//
// # Limits, compression and observability
//
// Every wait is bounded by default: Options.MaxMessageSize (16 MiB),
// WriteTimeout (10s), MessageTimeout (90s) and CloseTimeout (5s), the
// handshake's HandshakeTimeout (10s) and, on a Server, MaxHeaderBytes
// (16 KiB). Options.PingInterval turns on heartbeats, which cut silent
// peers. Reads have no other deadline: set one with [Conn.SetReadDeadline]
// and move it on in the callbacks. Options.Compression turns on
// permessage-deflate. Options.Metrics (a [Metrics]) counts handshakes,
// connections, messages and outboxes; Options.Logger receives recovered
// panics, accept errors and, at level Debug, each connection that ends.
//
// # Where next
//
// README.md, at the root of the module, is the manual: the two server paths
// and shutting down, the handshake (OnRequest), the client, WebSockets over
// HTTP/2, fan-out, streaming, the Event lifecycle and its errors, every
// option with its default and memory cost, compression, netpoll mode,
// metrics and logs. MIGRATING.md puts the calls of gorilla/websocket, gws
// and coder/websocket beside gust's. The examples (ExampleUpgrader,
// ExampleServer, ExampleDial, ExampleUpgrader_onRequest,
// ExampleConn_NextWriter, ...) run as tests. The package
// github.com/gustws/gust/hub adds topics and fan-out across processes on
// the connections' outboxes, and github.com/gustws/gust/metrics implements
// Metrics with counters for expvar.
package gust
