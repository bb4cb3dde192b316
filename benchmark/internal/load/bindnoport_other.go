//go:build !linux

package load

import "syscall"

// BindNoPort is nil elsewhere: bind takes a port of the source address, as it always did.
var BindNoPort func(network, address string, c syscall.RawConn) error
