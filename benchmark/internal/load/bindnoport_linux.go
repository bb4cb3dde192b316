package load

import "syscall"

// ipBindAddressNoPort is IP_BIND_ADDRESS_NO_PORT (linux/in.h), which the syscall package lacks.
const ipBindAddressNoPort = 24

// BindNoPort is the Dialer.Control of a connection bound to a source address (Config.SourceAddrs,
// closebench's clients):
// bind then leaves the port to connect, which may give the same local port to connections to
// different destinations (only the 4-tuple must be unique) rather than take one port of the
// address for every destination at once.
func BindNoPort(_, _ string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
	}); cerr != nil {
		return cerr
	}
	return err
}
