//go:build !unix

package netpoll

import "net"

// Raw needs Unix descriptors: elsewhere Init fails, and a connection's
// net.Conn carries its bytes.
type Raw struct{}

func (r *Raw) Init(nc net.Conn) bool { return false }

func (r *Raw) Read(dst []byte, size int, try bool) (*[]byte, int, bool, error) {
	return nil, 0, false, nil
}

func (r *Raw) Write(p []byte, try bool, arm func() bool) (int, bool, error) { return 0, false, nil }
