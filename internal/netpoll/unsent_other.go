//go:build !linux

package netpoll

import "net"

// LimitUnsent does nothing here and reports false: the limit
// (TCP_NOTSENT_LOWAT) is Linux's.
func LimitUnsent(nc net.Conn, n int) bool { return false }
