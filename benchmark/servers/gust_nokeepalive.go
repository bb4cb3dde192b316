package servers

import (
	"net"

	"github.com/gustws/gust"
)

// gust-nokeepalive and gust-netpoll-nokeepalive: gust and gust-netpoll with TCP keepalive off on
// the accepted connections. net.Listen, which the other servers use as most programs do, has the
// kernel probe every connection idle for 15 s, every 15 s; with a quarter of a million idle
// connections on one machine (scripts/bench-many), the probes of both ends, 33,000 packets a
// second and in bursts where connections had been opened together, overflowed loopback's receive
// backlog, and the kernel cut the connections whose probes went unanswered. A server that holds
// that many connections turns keepalive off or lengthens it, and finds dead peers with WebSocket
// pings instead (gust's Options.PingInterval).
func init() {
	noKeepAlive := net.ListenConfig{KeepAlive: -1}
	register("gust-nokeepalive", "github.com/gustws/gust: as gust, with TCP keepalive off on the accepted connections", func(addr string) (Server, error) {
		return startGustOn(noKeepAlive, addr, gust.Options{})
	})
	register("gust-netpoll-nokeepalive", "github.com/gustws/gust: as gust-netpoll, with TCP keepalive off on the accepted connections", func(addr string) (Server, error) {
		return startGustOn(noKeepAlive, addr, gust.Options{Netpoll: true})
	})
}
