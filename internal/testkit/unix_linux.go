package testkit

import (
	"net"
	"os"
	"syscall"
	"testing"
)

// UnixPair returns the two ends of a Unix stream socketpair, as the
// *net.UnixConns net.FileConn makes of them.
func UnixPair(t testing.TB) (nc, peer net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []*net.Conn{&nc, &peer} {
		f := os.NewFile(uintptr(fds[i]), "socketpair")
		*c, err = net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return nc, peer
}
