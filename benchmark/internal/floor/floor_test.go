//go:build linux

// Package floor measures the costs no WebSocket server can avoid, for the argument in
// benchmark/README.md about scenario c's system-call floor:
//
//	cd benchmark && taskset -c 0 go test -run '^$' -bench . ./internal/floor
package floor

import (
	"net"
	"syscall"
	"testing"
)

// BenchmarkEAGAINRead is the read(2) a goroutine-per-connection server makes after each
// message, on a socket with nothing more to read, before the goroutine parks in the netpoller.
func BenchmarkEAGAINRead(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	peer, ok := <-accepted
	if !ok {
		b.Fatal("accept failed")
	}
	defer peer.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	var readErr error
	b.ResetTimer()
	err = raw.Read(func(fd uintptr) bool {
		for range b.N {
			if _, err := syscall.Read(int(fd), buf); err != syscall.EAGAIN {
				readErr = err
				return true
			}
		}
		return true
	})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if readErr != nil {
		b.Fatalf("read returned %v, want EAGAIN", readErr)
	}
}
