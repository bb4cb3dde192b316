//go:build !unix

package gust

// Without Unix descriptors a connection's net.Conn carries its bytes
// (netConnTransport): it keeps its read buffer while it waits.
func newRawTransport(c *Conn) transport { return nil }
