//go:build !linux

package load

import "syscall"

// bindNoPort: elsewhere bind takes a port of the source address, as it always did.
var bindNoPort func(network, address string, c syscall.RawConn) error
