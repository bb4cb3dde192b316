//go:build !linux

package gust

import "time"

// Netpoll mode needs epoll: elsewhere Options.Netpoll is ignored, and every
// connection runs in goroutine mode.

type netpollState struct{}

func (c *Conn) adoptSocket()     {}
func (c *Conn) park() bool       { return false }
func (c *Conn) wake()            {}
func (c *Conn) wakeAt(time.Time) {}
func (c *Conn) unpark()          {}

func (np *netpollState) peerEnded() bool         { return false }
func (np *netpollState) readDeadline() time.Time { return time.Time{} }

func (c *Conn) sockRead([]byte, bool) (*[]byte, int, bool, error) { panic("unreachable") }
func (c *Conn) sockWrite([]byte, bool) (int, error)               { panic("unreachable") }
