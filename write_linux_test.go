package gust

import (
	"bytes"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// sizedTCP is a TCP connection whose RawConn records the size of every
// write gust makes through it (what its rawTransport has to write).
type sizedTCP struct {
	*net.TCPConn
	c     *Conn
	sizes chan int
}

func (s *sizedTCP) SyscallConn() (syscall.RawConn, error) {
	raw, err := s.TCPConn.SyscallConn()
	return sizedRaw{raw, s}, err
}

type sizedRaw struct {
	syscall.RawConn
	s *sizedTCP
}

func (r sizedRaw) Write(f func(uintptr) bool) error {
	if t, ok := r.s.c.tr.(*rawTransport); ok && t.Left() > 0 {
		r.s.sizes <- t.Left()
	}
	return r.RawConn.Write(f)
}

// TestEarlyFlush: the answers to a large batch that drained the socket (a
// read of at least 40 KiB, short of the buffer) leave in two writes, the
// first once 16 KiB are corked, so that a pipelining peer that waits for
// them can work while the rest is dispatched. A small batch is answered in
// one write, and so is a read that filled the buffer (more bytes wait, the
// server is the one behind).
func TestEarlyFlush(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer peer.Close()
	nc, err := ln.Accept()
	require.NoError(t, err)
	st := &sizedTCP{TCPConn: nc.(*net.TCPConn), sizes: make(chan int, 64)}

	f := frame(0x82, repeat("a", 1024)) // 1,030 bytes masked; the echo is 1,028
	const echo = 1028
	// 47 frames, 48,410 bytes, there before the first read: it takes them
	// all and drains the socket.
	_, err = peer.Write(bytes.Repeat(f, 47))
	require.NoError(t, err)
	waitReadable(t, st.TCPConn, 47*len(f))

	c := newConn(st, newConfig(Options{}, true), echoBench{}, true, nil, "")
	st.c = c
	done := make(chan struct{})
	go func() { c.ReadLoop(); close(done) }()
	require.Equal(t, 16*echo, <-st.sizes, "the first 16 KiB of answers leave early")
	require.Equal(t, 31*echo, <-st.sizes, "the rest, when the batch is dispatched")
	_, err = io.ReadFull(peer, make([]byte, 47*echo))
	require.NoError(t, err)

	_, err = peer.Write(bytes.Repeat(f, 3))
	require.NoError(t, err)
	require.Equal(t, 3*echo, <-st.sizes, "a small batch: one write")
	_, err = io.ReadFull(peer, make([]byte, 3*echo))
	require.NoError(t, err)

	require.True(t, drainedBatch(40<<10, 64<<10))
	require.False(t, drainedBatch(64<<10, 64<<10), "a full read: more bytes wait")
	require.False(t, drainedBatch(40<<10-1, 64<<10), "a small batch")

	peer.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ReadLoop did not end when the peer left")
	}
}

// waitReadable waits until n bytes wait in c's receive buffer.
func waitReadable(t *testing.T, c *net.TCPConn, n int) {
	t.Helper()
	raw, err := c.SyscallConn()
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var avail int32
		raw.Control(func(fd uintptr) {
			syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&avail)))
		})
		if int(avail) >= n {
			return
		}
		require.True(t, time.Now().Before(deadline), "%d of %d bytes arrived", avail, n)
		time.Sleep(time.Millisecond)
	}
}
