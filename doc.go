// Package gust is a WebSocket library (RFC 6455) for API servers, push and chat
// backends.
//
// A connection is a [*Conn]. It comes from an [Upgrader] inside a net/http
// handler, from a [Server] that runs its own accept loop, or from [Dial] on
// the client side: the same type in every case. Each Conn reports what
// happens to it through an [Event] handler, and [Conn.ReadLoop] runs that
// handler in the goroutine that calls it.
//
// Start with ExampleUpgrader, ExampleServer and ExampleDial. Users of
// gorilla/websocket or lxzan/gws will find each of their calls beside its
// gust equivalent in MIGRATING.md, at the root of the module.
//
// # Server paths
//
// An [Upgrader] turns a net/http request into a Conn: call [Upgrader.Upgrade]
// in any handler, then run the Conn's ReadLoop (in the handler itself, or in
// a goroutine of your choice). Its zero value is usable; set Handler, Options
// and the handshake fields (Subprotocols, ResponseHeader, CheckOrigin,
// HandshakeTimeout) before the first request. Upgrade takes the connection
// over through [http.NewResponseController], so it works behind routers and
// middleware whose ResponseWriter can hijack or has an Unwrap method: a chi
// handler is an http.HandlerFunc; with gin, pass ctx.Writer and ctx.Request;
// with echo, c.Response() and c.Request(). A request that is not an
// acceptable handshake is answered (400, 403, 405, 426) and Upgrade returns
// a [*HandshakeError]. To refuse a request for reasons of your own, see the
// handshake, below.
//
// The net/http server still owns the request head: set its ReadHeaderTimeout
// and MaxHeaderBytes, since gust sees the request only once net/http has read
// it. net/http's Shutdown does not cover hijacked connections:
// [Upgrader.Shutdown] does, for the connections the Upgrader made (1001 to
// each, then it waits for them, up to its context; call it after the
// http.Server's), and [Upgrader.Close] cuts them at once.
//
// A [Server] accepts WebSocket connections on any net.Listener with its own
// accept loop and HTTP/1.1 handshake parser, without net/http: every request
// on it that asks for a WebSocket is a handshake, whatever its path, and
// HTTPHandler, if set, serves the others. Its Upgrader field holds the
// handler, the Options and the handshake settings (as net/http's Server
// holds a Handler), and it adds MaxHeaderBytes and TLSConfig. Its zero
// value is usable too. [Server.Shutdown] sends a close
// frame with 1001 (going away) to every connection and waits for them, up to
// its context; [Server.Close] cuts them at once. Serve then returns
// [ErrServerClosed].
//
// WebSockets over HTTP/2 (RFC 8441) come through the Upgrader: an extended
// CONNECT request becomes a Conn on its stream. The handler must run ReadLoop
// itself, since returning ends the stream, and Go's HTTP/2 server offers
// extended CONNECT only when the process runs with GODEBUG=http2xconnect=1.
// The Server speaks HTTP/1.1 only.
//
// # The handshake
//
// [Upgrader.OnRequest] is called for every handshake request that passed the
// protocol's checks and CheckOrigin, on both paths and over HTTP/2 too,
// before anything is answered and before OnOpen, in the handshake's
// goroutine (the handler's, on an Upgrader; on a Server its time counts
// against HandshakeTimeout). It receives:
//
//   - the *http.Request: net/http's on an Upgrader, one built from the
//     parsed head on a Server, with the method, URL (path and query),
//     Proto, RequestURI, header fields (r.Cookie works), Host, RemoteAddr,
//     over TLS the TLS state, no body, and a context that carries
//     http.LocalAddrContextKey and ends with the handshake. gust does not
//     keep it once OnRequest returns: store what the connection needs with
//     [Conn.Set].
//   - the header of the response, to add fields to (Set-Cookie, say),
//     after those set on the ResponseWriter and ResponseHeader's. A
//     Sec-WebSocket-Protocol set there chooses this request's subprotocol;
//     one the client did not offer gets 500, logged. The fields the
//     handshake sets itself (Upgrade, Connection, Sec-WebSocket-Accept and
//     -Extensions, Content-Length, Transfer-Encoding, and
//     Sec-WebSocket-Protocol anywhere but there) are skipped.
//   - the connection-to-be: what [Conn.Set] stores there (a user ID from a
//     cookie or a token) is there for OnOpen and every later callback. It
//     has no network connection until the answer is written: its writes,
//     Ping, Close and CloseNow fail with net.ErrClosed, RemoteAddr and
//     NetConn are nil (use r.RemoteAddr), and Subprotocol, Compressed and
//     the deadline setters are settled from OnOpen on. Keep registrations
//     (a room) for OnOpen: an accepted handshake may still fail before it,
//     and then neither OnOpen nor OnClose is called.
//
// Returning nil accepts. Returning a [*HandshakeError] refuses with its
// Status (403 when 0; one that is not 3xx, 4xx or 5xx becomes 500), Header
// (Content-Length, Transfer-Encoding and Connection excepted) and Body: a
// 401 with WWW-Authenticate, a redirect, a 429 with Retry-After. Any other
// error refuses with 403 and no body, so that its text stays on the server.
// Either way no Conn is made, OnOpen is not called, and Upgrade returns a
// *HandshakeError with the status sent and the error in Err. A panic in
// OnRequest is logged and answered with 500 (unless
// Options.DisableRecovery is set). A response field whose value holds CR,
// LF or another control character but tab, or whose name is not a token,
// is not written: the handshake is answered with 500 and the mistake
// logged. See ExampleUpgrader_onRequest.
//
// On an Upgrader, fields set on the ResponseWriter before Upgrade go into
// the handshake response too, as they would into any other.
//
// # The client
//
// [Dial] opens a connection to a ws:// or wss:// URL and returns the same
// [*Conn] type, whose writes are masked as RFC 6455 requires of a client; run
// its ReadLoop as on a server. [DialOptions] holds the connection's Options
// in a field of that name, and what only dialing needs: Subprotocols, Header,
// HandshakeTimeout, MaxHeaderBytes, TLSConfig, a Proxy (HTTP CONNECT or
// SOCKS5), HTTP2, and NetDialContext, which may return a connection you
// already hold (a unix socket, an in-memory pipe) for Dial to run the
// handshake over. A nil *DialOptions means the defaults. Redirects are not
// followed.
//
// # Events and the lifecycle
//
// An [Event] has five methods: OnOpen once, when ReadLoop starts; OnMessage,
// OnPing and OnPong as frames arrive; and OnClose exactly once, last,
// whatever ended the connection. Embed [BuiltinEventHandler] to write only
// the methods you need: its OnPing answers with a pong, as the RFC requires,
// so a handler that overrides OnPing should answer itself.
//
// The callbacks run one at a time in the goroutine that runs ReadLoop, in the
// order the frames arrived; gust starts no goroutine per connection of its
// own. [Options.Parallel] moves OnMessage calls onto a bounded number of
// short-lived goroutines per connection, and order is then not kept.
//
// A [Message] holds its Data in a pooled buffer that belongs to the handler
// until it calls [Message.Close]. After Close, Data may be reused for another
// message: copy what you keep. Not calling Close is safe, only slower.
//
// Values that belong to a connection (a user ID, a room) can be stored on it
// with [Conn.Set], from OnRequest on, and read with [Conn.Get] from any
// goroutine.
//
// # Writing
//
// Every write method is safe from any goroutine; writes are serialised
// inside the Conn, so there is no need for a lock of your own.
// [Conn.WriteMessage] sends one message of type [OpText] or [OpBinary], and
// p may be reused when it returns; [Conn.WriteString] sends text, and
// [Conn.WriteJSON] a value encoded by encoding/json ([Message.DecodeJSON]
// decodes one). [Conn.Ping] sends a ping and returns when its pong arrives,
// with the round-trip time; call it from another goroutine than the read
// goroutine's, which reads the pong.
//
// Writes made while the read goroutine dispatches the frames of one read
// (from OnMessage, OnPing and OnPong, or from other goroutines meanwhile) are
// corked: they wait in a buffer and leave together, in one system call,
// before the next blocking read, so an echo or request/response server makes
// one write per read rather than one per message. (A read of 40 KiB or more
// that emptied the socket sends its first 16 KiB of answers at once, so
// that a pipelining peer waiting for them is not idle while the rest is
// dispatched.) A corked write returns
// before its bytes are sent; if sending them fails, the connection ends and
// OnClose gets the error. A callback that blocks therefore delays every
// corked write: hand slow work to a goroutine, or set Options.Parallel.
//
// [Conn.WriteAsync] and [Conn.WritePreparedAsync] queue a message in the
// connection's outbox and return at once; a short-lived writer goroutine
// writes what is queued, all of a batch in one system call, and reports each
// result to a callback. The outbox holds Options.OutboxSize messages; past
// that, Options.OutboxPolicy decides: refuse with [ErrQueueFull] (the
// default), drop the oldest or the newest message, or close a slow consumer
// with 1008 ([ErrSlowConsumer]).
//
// [Conn.Close] starts the closing handshake with a code and a reason. Either
// side may send any code valid on the wire: 1000–1003 and 1007–1014 (1001
// going away for a server shutting down, 1008 policy violation, 1011 internal
// error, ...) and 3000–4999 for libraries and applications; other codes
// return [ErrInvalidCloseCode].
// The connection ends when the peer answers, or after Options.CloseTimeout.
// [Conn.CloseNow] cuts the connection at once, without a close frame. The
// [StatusCode] constants name the codes the RFC defines.
//
// # Compression
//
// Set [Options].Compression ([CompressionOptions]) with Enabled true for
// permessage-deflate (RFC 7692): a client offers it, a server accepts it.
// Each field means the same on both sides: the plain fields are about the
// messages this side sends, the Peer fields are what it asks of the peer's.
// Messages smaller than Threshold go out uncompressed, and
// [Conn.WriteUncompressed] sends data that is compressed already as it is.
// [Conn.Compressed] tells whether the handshake agreed on compression.
//
// # Streaming
//
// A message need not be held whole on either side. To receive large
// messages as they arrive, set [Options.StreamThreshold]: a message that
// outgrows it (or whose first frame announces more) reaches OnMessage as a
// stream, with [Message.Streamed] true and Data nil, and the handler reads
// it with [Message.Read] (a Message is an io.Reader, whole or streamed, so
// io.Copy(dst, m) serves both). Read reads the frames as they come, on the
// read goroutine, even with Options.Parallel; the stream is valid only
// until OnMessage returns, and what the handler left unread gust reads and
// discards. The checks apply as it goes: MaxMessageSize (1009), UTF-8 of
// text (1007, as soon as the bad byte arrives) and, compressed, the
// inflated size; Read returns the *ProtocolError and the connection fails
// once OnMessage returns. Control frames between the fragments are handled
// while Read waits: pings reach OnPing, and their pongs leave before the
// next read from the socket; a close frame is answered and ends the stream
// with its *CloseError. A streamed message costs the read buffer and at
// most StreamThreshold bytes (and, compressed, an inflater), whatever its
// size.
//
// To send one, [Conn.NextWriter] returns an io.WriteCloser that sends the
// message in fragments of up to Options.WriteBufferSize bytes as they fill,
// compressed as it goes when permessage-deflate was negotiated, and the last
// fragment on Close; [Conn.WriteFrom] sends what an io.Reader yields, such
// as a file, through it. While a NextWriter is open, the other data
// messages (and a second NextWriter) wait for its Close, and control frames
// (pings, pongs, heartbeats, a close frame) still go between its fragments,
// as RFC 6455 allows. Close it even after an error.
//
// # Fan-out
//
// To send one message to many connections, make a [PreparedMessage] once with
// [NewPreparedMessage] and write it to each with [Conn.WritePrepared]: the
// frame is built once, and compressed once per distinct compression setting
// of the receivers, rather than once per receiver. [Conn.WritePreparedAsync]
// queues one in the outbox without waiting for the socket. Topics and fan-out
// across processes live in the package github.com/gustws/gust/hub, built on
// the outbox.
//
// # Netpoll mode
//
// With [Options].Netpoll set (Linux), a connection that has dispatched all it
// received holds no goroutine and no buffer: it is parked on one of gust's
// event loops (one per GOMAXPROCS, each with its own epoll instance), which
// reads, parses and dispatches what arrives, and parks it again. The parser
// is the one goroutine mode uses: it keeps a frame that arrived in part and
// resumes it at the next arrival. [Conn.ReadLoop] returns at the
// connection's first idle moment, so a net/http handler returns at once,
// its request's context cancelled, while the connection lives on: take
// what the connection needs from the request before Upgrade, and do what
// belongs to its end in OnClose, which still comes exactly once. The limits, compression, heartbeats and
// Shutdown behave as in goroutine mode. The callbacks run on the loop, so
// they must not block: one that waits holds up every connection of its
// loop (Options.Parallel, or a goroutine of your own, is the way out). gust
// itself never waits on a loop: writes the socket does not take wait in a
// backlog, and a connection that must wait (for that backlog to drain, for
// a streamed message's handler) is served by a goroutine until it is idle
// again. The socket becomes gust's own after the handshake (its descriptor
// duplicated, the *net.TCPConn closed), so [Conn.NetConn] is a net.Conn of
// gust's. An idle connection then costs about 0.4 KiB of heap (its Conn,
// its socket and its place on the loop; its read state goes back to a pool
// while it is parked) against about 1.5 KiB and a goroutine's stack in
// goroutine mode. Choose it for many mostly idle connections. TLS connections,
// HTTP/2 streams and wrapped conns, and every connection off Linux, stay in
// goroutine mode.
//
// # Limits and timeouts
//
// Every wait is bounded by default, and each bound is a field:
//
//   - [Options.MaxMessageSize] (16 MiB) is the largest message a peer may
//     send; a larger one fails the connection with 1009. Memory follows the
//     bytes that arrived, not the length a frame header announces, and
//     inflating a compressed message stops at the same limit. A streamed
//     message (Options.StreamThreshold) is held to it too, without being
//     held in memory.
//   - [Options.WriteTimeout] (10s) ends a connection whose peer takes no
//     bytes for that long, so that a peer that stops reading cannot hold a
//     writer forever.
//   - [Options.CloseTimeout] (5s) bounds the wait for the peer's answer to a
//     close frame.
//   - [Upgrader.HandshakeTimeout] (10s) bounds writing the handshake response,
//     and on a Server also reading the request; [DialOptions].HandshakeTimeout
//     bounds the whole of Dial.
//   - [Server.MaxHeaderBytes] (16 KiB) bounds the request head on a Server;
//     a larger one is refused with 431.
//   - [Options.PingInterval] (off) and [Options.PingTimeout] (the interval)
//     drop silent peers: a connection on which no frame has arrived for the
//     interval is pinged, and cut without a close frame if nothing arrives
//     within the timeout after the ping, so within interval + timeout of
//     its last frame (give or take the timers' granularity, a quarter of
//     the shorter). The timers are shared by every connection: no goroutine
//     or timer per connection.
//
// Reads have no deadline of their own otherwise: heartbeats aside, use
// [Conn.SetReadDeadline] and move it on in the callbacks.
//
// # Errors
//
// OnClose says why the connection ended:
//
//   - [*CloseError] when close frames were exchanged: the code, the reason,
//     and ByPeer, true when the peer started the closing handshake.
//     [CloseStatus] returns its code, and 0 for any other error.
//   - [*ProtocolError] when the peer broke the protocol or a limit: gust sent
//     the close frame with the code the RFC names (1002, 1007, 1009) first.
//   - [*PanicError] when a callback panicked: gust recovered, logged it
//     with its stack to Options.Logger and closed with 1011 (unless
//     Options.DisableRecovery is set).
//   - [ErrServerClosed] when a Server or an Upgrader cut the connection
//     (Close, or a Shutdown whose context ended first).
//   - An error wrapping [os.ErrDeadlineExceeded] after WriteTimeout, a
//     deadline or a heartbeat that went unanswered, one wrapping [net.ErrClosed] after CloseNow, or the I/O error.
//
// [*HandshakeError] is every error [Dial] returns, with the Status, Header and
// first bytes of the Body when the server answered, and the cause in Err;
// Upgrade returns one for a request it refused, and OnRequest returns one
// to refuse with a response of its own. Writes on a connection that
// has ended return [net.ErrClosed]; [Conn.WriteAsync] returns [ErrQueueFull]
// or [ErrSlowConsumer] when its outbox is full, as Options.OutboxPolicy
// says, and [Conn.Close] returns [ErrInvalidCloseCode] for a
// code that may not be sent.
//
// # Metrics and logs
//
// Set Options.Metrics to a [Metrics] to count what happens on the
// connections those Options make: handshakes accepted and refused (by
// status), connections opened and closed (by close code and cause: "peer",
// "local", "protocol", "limit", "timeout", "slow", "panic", "shutdown",
// "io"), data messages and their bytes in and out, before and after
// compression, and messages queued in and dropped from outboxes. The hook is
// called synchronously and must not block; unset, it costs one nil check
// per event. The package github.com/gustws/gust/metrics implements it with
// atomic counters that expvar publishes in one line:
//
//	counters := new(metrics.Counters)
//	expvar.Publish("gust", counters)
//	srv := &gust.Server{Upgrader: gust.Upgrader{Options: gust.Options{Metrics: counters}}}
//
// and the module github.com/gustws/gust/metrics/prometheus with Prometheus
// counters and gauges, in a module of its own so that importing gust pulls
// no Prometheus code.
//
// Options.Logger takes a [log/slog.Logger] (default slog.Default()): a
// recovered panic and a Server's accept errors are records at level Error,
// and each connection that ends is one at level Debug, with the details as
// attributes: "remote", "code", "cause", "err", "panic" and "stack".
package gust
