package netpoll

import (
	"net"
	"syscall"
)

// tcpNotSentLowat is Linux's TCP_NOTSENT_LOWAT (not in package syscall).
const tcpNotSentLowat = 0x19

// LimitUnsent asks the kernel to take no more writes on nc's TCP socket
// while about n bytes written to it have not been sent (TCP_NOTSENT_LOWAT),
// and reports whether it could. Bytes sent and not yet acknowledged do not
// count, so a fast path keeps its full window in flight; a peer that stops
// reading holds about n bytes of kernel memory rather than the whole send
// buffer (tcp_wmem's maximum, 4 MiB by default). nc may be a *net.TCPConn,
// a Sock, an Under over either, or a layer over one of those (crypto/tls);
// anything else leaves the socket as it was.
func LimitUnsent(nc net.Conn, n int) bool {
	if l, ok := nc.(interface{ NetConn() net.Conn }); ok {
		nc = l.NetConn()
	}
	if u, ok := nc.(*Under); ok {
		if s := u.Sock(); s != nil {
			nc = s
		} else {
			nc = u.nc
		}
	}
	set := func(fd int) bool {
		return syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, tcpNotSentLowat, n) == nil
	}
	switch c := nc.(type) {
	case *Sock:
		if !c.acquire() {
			return false
		}
		defer c.release()
		return set(int(c.fd))
	case *net.TCPConn:
		raw, err := c.SyscallConn()
		if err != nil {
			return false
		}
		ok := false
		if raw.Control(func(fd uintptr) { ok = set(int(fd)) }) != nil {
			return false
		}
		return ok
	}
	return false
}
