//go:build !unix

package gust

// idleReader is not used where syscall.RawConn reads are not available:
// connections keep their read buffer while they wait.
type idleReader struct{}

func (c *Conn) initIdleReader() {}

func (c *Conn) fillIdle() (bool, error) { return false, nil }

func (c *Conn) tryRead(p []byte) (int, error) { panic("unreachable") }

// Writes go through the net.Conn, under a deadline moved as they go.

func (c *Conn) initRawWriter() {}

func (c *Conn) rawWrites() bool { return false }

func (c *Conn) writeRaw(p []byte) (int, error) { panic("unreachable") }

func (c *Conn) tryWriteRaw(p []byte) (int, error) { panic("unreachable") }
