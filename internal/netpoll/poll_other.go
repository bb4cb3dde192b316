//go:build !linux

package netpoll

import (
	"errors"
	"net"
)

// Event loops need epoll: elsewhere Adopt fails, no Sock exists, and a
// connection stays in the runtime's netpoller (goroutine mode).

// ErrNotSocket is Adopt's error for a connection that is neither a
// *net.TCPConn nor a *net.UnixConn.
var ErrNotSocket = errors.New("netpoll: not a TCP or Unix socket")

// Adopt fails with errors.ErrUnsupported.
func Adopt(nc net.Conn) (*Sock, error) { return nil, errors.ErrUnsupported }

// Conns reports how many sockets the event loops hold: none.
func Conns() int { return 0 }

// Register, Remove and rejoin are never called: no Sock exists.
func (s *Sock) Register(o Owner) error { return errors.ErrUnsupported }
func (s *Sock) Remove(o Owner)         {}
func (s *Sock) InLoop() bool           { return false }
func (s *Sock) rejoin()                {}
