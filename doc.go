// Package gust is a WebSocket library (RFC 6455) for API servers, push and chat
// backends.
//
// A connection is a [*Conn]. It comes from an [Upgrader] inside a net/http
// handler, from a [Server] that runs its own accept loop and handshake
// parser on any net.Listener, or from [Dial] and [NewClientFromConn] on the
// client side: the same type, with masked writes. The Upgrader also answers
// WebSockets over HTTP/2 (RFC 8441), and Dial can open them. Each Conn reports what happens to it through an
// [Event] handler: OnOpen once, then OnMessage, OnPing and OnPong as frames
// arrive, and exactly one OnClose at the end, whatever ended the connection.
//
// [Conn.ReadLoop] reads frames in the goroutine that calls it and calls the
// handler synchronously; gust starts no goroutine per connection of its own.
// Writes are safe from any goroutine. Writes made while the read goroutine is
// dispatching the bytes of one read are corked: they are written together, in
// one system call, before the next blocking read.
//
// For fan-out, a [PreparedMessage] is framed once for any number of
// connections, and [Conn.WriteAsync] and [Conn.WritePreparedAsync] queue in
// the connection's bounded outbox (Options.OutboxSize, Options.OutboxPolicy)
// without waiting for the socket. The package github.com/gustws/gust/hub
// publishes to topics of connections on that outbox, within a process or,
// with a Broker, across several.
//
// See ExampleUpgrader, ExampleServer and ExampleDial to start.
package gust
