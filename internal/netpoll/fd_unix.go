//go:build unix

package netpoll

import (
	"io"
	"os"
	"syscall"
)

// ReadFD reads once from fd into p, retrying when interrupted; again
// reports that there was nothing to read (EAGAIN), and a peer that closed
// its side reads as io.EOF.
func ReadFD(fd int, p []byte) (n int, again bool, err error) {
	for {
		n, err := sysRead(fd, p)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return 0, true, nil
		case err != nil:
			return 0, false, os.NewSyscallError("read", err)
		case n == 0:
			return 0, false, io.EOF
		}
		return n, false, nil
	}
}

// WriteFD writes p to fd until it is gone or the socket is full (again),
// retrying when interrupted.
func WriteFD(fd int, p []byte) (n int, again bool, err error) {
	for n < len(p) {
		k, err := sysWrite(fd, p[n:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return n, true, nil
		case err != nil:
			return n, false, os.NewSyscallError("write", err)
		case k == 0:
			return n, false, io.ErrUnexpectedEOF
		}
		n += k
	}
	return n, false, nil
}

// rawMax is the longest read or write made as a raw system call on Linux
// (sys_linux.go).
const rawMax = 64 << 10

func closeFD(fd int) { syscall.Close(fd) }

func shutdownWrite(fd int) error {
	return os.NewSyscallError("shutdown", syscall.Shutdown(fd, syscall.SHUT_WR))
}
