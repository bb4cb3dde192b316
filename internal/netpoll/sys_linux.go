//go:build linux && !race

package netpoll

import (
	"syscall"
	"unsafe"
)

// On Linux, a read or write of at most rawMax bytes is a raw system call,
// one that does not tell the scheduler it is in the kernel: the
// descriptors are non-blocking, so it never waits, and it copies little.
// Made the usual way, each call marks its P as in a system call, and
// sysmon takes the P back from a thread it finds in one at two of its
// ticks; on a busy core it finds an event loop preempted in a write, and
// each take starts a thread and keeps sysmon waking every 20 µs, which
// preempts the loop again (scenario c in netpoll mode: 0.05 of sysmon's
// sleeps and 0.12-0.19 context switches per message, against 0.01-0.02
// and 0.04-0.14 raw; benchmark/results/2026-11-29-loops.md). A longer
// copy (a large message read or written whole) goes the usual way, so
// that the P is not held through it. Under the race detector every call
// goes the usual way: syscall.Read and Write tell it of the
// synchronisation a socket makes, which tests across a connection rely on.

func sysRead(fd int, p []byte) (int, error) {
	if len(p) > rawMax {
		return syscall.Read(fd, p)
	}
	return rawIO(syscall.SYS_READ, fd, p)
}

func sysWrite(fd int, p []byte) (int, error) {
	if len(p) > rawMax {
		return syscall.Write(fd, p)
	}
	return rawIO(syscall.SYS_WRITE, fd, p)
}

func rawIO(trap uintptr, fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	n, _, errno := syscall.RawSyscall(trap, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
