// Package gust is a WebSocket library (RFC 6455, with permessage-deflate,
// RFC 7692) for API servers, push and chat backends.
//
// A connection is a [*Conn], the same type on every side, and there are
// two ways to accept one: an [Upgrader] makes it inside any net/http
// handler ([Upgrader.Upgrade]), and a [Server] makes them with its own
// accept loop and HTTP/1.1 handshake parser on any net.Listener, with
// plain HTTP beside them on the same port (Server.HTTPHandler). [Dial]
// opens one as a client. The zero values of Upgrader, Server and [Options]
// are ready to use, and a nil [*DialOptions] means the defaults.
// [Upgrader.OnRequest] sees each handshake request before it is answered,
// and may refuse it with a [*HandshakeError] or attach data with
// [Conn.Set]. [Server.Shutdown] and [Upgrader.Shutdown] send close 1001 to
// every connection and wait for them (net/http's own Shutdown does not
// cover hijacked connections: behind net/http, call both); [Server.Drain]
// spreads the closes of a rolling restart over a window.
//
// # Events
//
// [Conn.ReadLoop] reads the connection and calls its [Event] handler in
// the goroutine that calls it, one callback at a time: OnOpen once,
// OnMessage, OnPing and OnPong as frames arrive, and OnClose exactly once,
// last, with an error that says what ended the connection (a [*CloseError],
// whose code [CloseStatus] reads, a [*ProtocolError], a [*PanicError], ...).
// Embed [BuiltinEventHandler] to write only the methods you need. A
// [Message]'s Data is pooled and the handler's until [Message.Close].
//
// Every write is safe from any goroutine. Writes made while one read's
// frames are dispatched are corked into one system call; [Conn.WriteAsync]
// and [Conn.WritePreparedAsync] queue in a bounded outbox and never wait
// for the socket, and a [PreparedMessage] is framed once for many
// receivers.
//
// # Netpoll mode
//
// With [Options.Netpoll] (Linux), an idle connection holds no goroutine
// and no buffer: gust's epoll event loops read, parse and dispatch what
// arrives. ReadLoop returns at the connection's first idle moment, and
// callbacks run on a loop shared by many connections, so must not block.
//
// # Where next
//
// The examples (ExampleUpgrader, ExampleServer, ExampleDial,
// ExampleUpgrader_onRequest, ExampleServer_Drain, ...) run as tests.
// README.md at the root of the module is the guide: the quick start, the
// Event lifecycle, every option with its default. The pages in its docs/
// directory are the manual of each topic: netpoll mode, compression,
// fan-out and the hub, metrics and logs, the handshake, streaming,
// HTTP/2, running behind a proxy, conformance. MIGRATING.md puts the calls
// of gorilla/websocket, gws and coder/websocket beside gust's.
//
// The package github.com/gustws/gust/hub adds topics on the connections'
// outboxes, fanned out across processes through a Broker (on NATS:
// github.com/gustws/gust/cluster/nats), with presence, history and
// recovery; github.com/gustws/gust/metrics implements [Metrics] with
// counters for expvar.
package gust
