package gust

import (
	"io"
	"net"
	"testing"
	"time"
)

// streamConn is a net.Conn that serves a fixed number of pre-encoded frames
// to Read, in reads of up to chunk bytes, and counts (and discards) writes.
type streamConn struct {
	frames  []byte // one cycle of frames
	perLoop int    // frames in one cycle
	left    int    // frames still to serve
	off     int
	writes  int
	written int
	reads   int
}

func newStreamConn(frame []byte, total int) *streamConn {
	const cycle = 64
	var b []byte
	for i := 0; i < cycle; i++ {
		b = append(b, frame...)
	}
	return &streamConn{frames: b, perLoop: cycle, left: total}
}

func (s *streamConn) Read(p []byte) (int, error) {
	if s.left <= 0 && s.off%(len(s.frames)/s.perLoop) == 0 {
		return 0, io.EOF
	}
	s.reads++
	size := len(s.frames) / s.perLoop
	// Serve whole frames only, up to len(p), never past the last one.
	n := 0
	for n+size <= len(p) && s.left > 0 {
		k := copy(p[n:], s.frames[s.off:s.off+size])
		s.off = (s.off + k) % len(s.frames)
		n += k
		s.left--
	}
	if n == 0 { // p smaller than a frame: serve part of one
		k := copy(p, s.frames[s.off:s.off+size])
		s.off += k
		if s.off%size == 0 {
			s.left--
		}
		s.off %= len(s.frames)
		n = k
	}
	return n, nil
}

func (s *streamConn) Write(p []byte) (int, error) {
	s.writes++
	s.written += len(p)
	return len(p), nil
}

func (s *streamConn) Close() error                     { return nil }
func (s *streamConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (s *streamConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (s *streamConn) SetDeadline(time.Time) error      { return nil }
func (s *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (s *streamConn) SetWriteDeadline(time.Time) error { return nil }

type discardHandler struct{ BuiltinEventHandler }

// BenchmarkReadMessage1KiB reads masked 1 KiB binary messages, as a server
// does, and releases each one.
func BenchmarkReadMessage1KiB(b *testing.B) {
	benchmarkRead(b, OpBinary, 1024)
}

// BenchmarkReadText1KiB also validates UTF-8.
func BenchmarkReadText1KiB(b *testing.B) {
	benchmarkRead(b, OpText, 1024)
}

func benchmarkRead(b *testing.B, op Opcode, size int) {
	f := frame(0x80|byte(op), repeat("a", size))
	b.ReportAllocs()
	b.SetBytes(int64(size))
	sc := newStreamConn(f, b.N)
	c := newConn(sc, newConfig(Options{}, true), discardHandler{}, true, nil, "")
	b.ResetTimer()
	c.ReadLoop()
}

// BenchmarkWriteMessage1KiB writes 1 KiB binary messages from a server.
func BenchmarkWriteMessage1KiB(b *testing.B) { benchmarkWrite(b, true) }

// BenchmarkWriteMessage1KiBClient writes masked 1 KiB binary messages.
func BenchmarkWriteMessage1KiBClient(b *testing.B) { benchmarkWrite(b, false) }

func benchmarkWrite(b *testing.B, server bool) {
	sc := newStreamConn(nil, 0)
	c := newConn(sc, newConfig(Options{}, true), discardHandler{}, server, nil, "")
	p := repeat("a", 1024)
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		if err := c.WriteMessage(OpBinary, p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteJSON writes a small struct as JSON: what it allocates is
// encoding/json's own cost, since the buffer and the Encoder are pooled.
func BenchmarkWriteJSON(b *testing.B) {
	sc := newStreamConn(nil, 0)
	c := newConn(sc, newConfig(Options{}, true), discardHandler{}, true, nil, "")
	v := &jsonPoint{Name: "point", X: 3, Y: 4, Tags: []string{"a", "b"}}
	b.ReportAllocs()
	for b.Loop() {
		if err := c.WriteJSON(v); err != nil {
			b.Fatal(err)
		}
	}
}

type echoBench struct{ BuiltinEventHandler }

func (echoBench) OnMessage(c *Conn, m *Message) {
	c.WriteMessage(m.Opcode, m.Data)
	m.Close()
}

// BenchmarkEchoCorked echoes pipelined 300-byte messages read in batches,
// and reports the write and read system calls per message: corking makes
// one write per batch of reads, not one per message.
func BenchmarkEchoCorked(b *testing.B) {
	f := frame(0x81, repeat("a", 300))
	b.ReportAllocs()
	b.SetBytes(300)
	sc := newStreamConn(f, b.N)
	c := newConn(sc, newConfig(Options{}, true), echoBench{}, true, nil, "")
	b.ResetTimer()
	c.ReadLoop()
	b.StopTimer()
	b.ReportMetric(float64(sc.writes)/float64(b.N), "writes/msg")
	b.ReportMetric(float64(sc.reads)/float64(b.N), "reads/msg")
	if sc.written < b.N*302 {
		b.Fatalf("echoed %d bytes for %d messages", sc.written, b.N)
	}
}

// BenchmarkEchoCorkedMetrics is BenchmarkEchoCorked with a Metrics set
// (atomic counters, as the metrics package's): still no allocation per
// message.
func BenchmarkEchoCorkedMetrics(b *testing.B) {
	f := frame(0x81, repeat("a", 300))
	b.ReportAllocs()
	b.SetBytes(300)
	sc := newStreamConn(f, b.N)
	m := &countingMetrics{}
	c := newConn(sc, newConfig(Options{Metrics: m}, true), echoBench{}, true, nil, "")
	b.ResetTimer()
	c.ReadLoop()
	b.StopTimer()
	if got := m.bytes.Load(); got != int64(b.N)*1200 {
		b.Fatalf("Metrics counted %d bytes for %d messages", got, b.N)
	}
}
