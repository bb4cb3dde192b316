//go:build unix && (!linux || race)

package netpoll

import "syscall"

// Elsewhere, and under the race detector, reads and writes go the usual
// way (sys_linux.go says why Linux does not).

func sysRead(fd int, p []byte) (int, error)  { return syscall.Read(fd, p) }
func sysWrite(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }
