// Package testkit holds what the tests of several gust packages share: the
// two ends of a loopback connection, a peer that compresses as a browser
// does, a buffer that goroutines write to at once. Only tests import it.
package testkit

import (
	"bytes"
	"compress/flate"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// TCPPair returns the two ends of a TCP connection over loopback, closed
// when the test ends.
func TCPPair(t testing.TB) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return TCPPairOn(t, ln)
}

// TCPPairOn is TCPPair over ln, which it closes.
func TCPPairOn(t testing.TB, ln net.Listener) (a, b *net.TCPConn) {
	t.Helper()
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, _ := ln.Accept()
		accepted <- nc
	}()
	nb, err := net.Dial(ln.Addr().Network(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	na := <-accepted
	if na == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { na.Close(); nb.Close() })
	for _, nc := range []net.Conn{na, nb} {
		nc.SetDeadline(time.Now().Add(20 * time.Second))
	}
	return na.(*net.TCPConn), nb.(*net.TCPConn)
}

// DeflatePeer compresses as a browser does: one flate.Writer kept across
// messages (context takeover), sync-flushed, its tail removed; and inflates
// with one reader that keeps its window.
type DeflatePeer struct {
	buf bytes.Buffer
	fw  *flate.Writer
	fr  io.ReadCloser
	in  bytes.Buffer
}

func NewDeflatePeer() *DeflatePeer {
	d := &DeflatePeer{}
	d.fw, _ = flate.NewWriter(&d.buf, flate.BestSpeed)
	d.fr = flate.NewReader(&d.in)
	return d
}

// Compress returns p compressed as the payload of one message.
func (d *DeflatePeer) Compress(p []byte) []byte {
	d.buf.Reset()
	d.fw.Write(p)
	d.fw.Flush()
	b := bytes.Clone(d.buf.Bytes())
	return b[:len(b)-4]
}

// Decompress inflates a message's payload, keeping context across calls.
func (d *DeflatePeer) Decompress(t testing.TB, p []byte) []byte {
	t.Helper()
	d.in.Write(p)
	d.in.Write([]byte{0, 0, 0xff, 0xff})
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for d.in.Len() > 0 {
		n, err := d.fr.Read(buf)
		out.Write(buf[:n])
		if err != nil && err != io.EOF {
			if err != io.ErrUnexpectedEOF {
				t.Fatalf("inflating: %v", err)
			}
			break
		}
	}
	return out.Bytes()
}

// DeflateBomb is size bytes of zeros, deflated as a peer sends them: about
// a thousandth of the size, without the sync tail.
func DeflateBomb(size int) []byte {
	var z bytes.Buffer
	fw, _ := flate.NewWriter(&z, flate.BestCompression)
	zeros := make([]byte, 1<<20)
	for ; size > 0; size -= len(zeros) {
		fw.Write(zeros[:min(size, len(zeros))])
	}
	fw.Flush()
	return z.Bytes()[:z.Len()-4]
}

// Buffer is a bytes.Buffer that goroutines may write to at once (a
// logger's records, a child process's output) while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Recorder collects values that goroutines add at once (a watcher's
// events, a callback's arguments) while the test reads them. Its zero
// value is ready to use.
type Recorder[T any] struct {
	mu   sync.Mutex
	vals []T
}

// Add records v; it fits where a func(T) is asked for (r.Add).
func (r *Recorder[T]) Add(v T) {
	r.mu.Lock()
	r.vals = append(r.vals, v)
	r.mu.Unlock()
}

// Get returns a copy of what was recorded so far.
func (r *Recorder[T]) Get() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.vals)
}

// Wait waits, up to 10 s, until r holds n values, and returns them all;
// past that it fails t, saying what it holds.
func (r *Recorder[T]) Wait(t testing.TB, n int) []T {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got := r.Get(); len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %d values, have %v", n, r.Get())
		}
		time.Sleep(time.Millisecond)
	}
}
