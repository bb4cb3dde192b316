package interop

import (
	"encoding/binary"
	"net"
	"syscall"
	"unsafe"
)

// tcpBytes returns how many bytes the kernel has received on c and how many
// of those it sent the peer has acknowledged (struct tcp_info's
// tcpi_bytes_received and tcpi_bytes_acked, Linux 4.2 and later): what
// went over the wire, compressed or not, frame headers included.
func tcpBytes(c net.Conn) (received, acked int64, ok bool) {
	sc, isSys := c.(syscall.Conn)
	if !isSys {
		return 0, 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	var info [256]byte
	size := uint32(len(info))
	var errno syscall.Errno
	cerr := raw.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_INFO,
			uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&size)), 0)
	})
	// tcpi_bytes_acked is at offset 120 and tcpi_bytes_received at 128.
	if cerr != nil || errno != 0 || size < 136 {
		return 0, 0, false
	}
	acked = int64(binary.NativeEndian.Uint64(info[120:]))
	received = int64(binary.NativeEndian.Uint64(info[128:]))
	return received, acked, true
}
