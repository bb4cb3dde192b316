//go:build !unix

package gust

// idleReader is not used where syscall.RawConn reads are not available:
// connections keep their read buffer while they wait.
type idleReader struct{}

func (c *Conn) initIdleReader() {}

func (c *Conn) fillIdle() (bool, error) { return false, nil }
