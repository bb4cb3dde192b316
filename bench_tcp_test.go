package gust

import "testing"

type countHandler struct {
	BuiltinEventHandler
	n    int
	want int
	done chan struct{}
}

func (h *countHandler) OnMessage(c *Conn, m *Message) {
	m.Close()
	if h.n++; h.n == h.want {
		close(h.done)
	}
}

// BenchmarkReadPipelinedTCP reads pipelined 2,396-byte text messages from
// a loopback TCP socket, as scenario b's server does: reads of up to the
// buffer's size end in the middle of a message, whose rest the next read
// brings (the message's time bound is armed and ended each time).
func BenchmarkReadPipelinedTCP(b *testing.B) {
	benchmarkReadTCP(b, 2396, 64)
}

// BenchmarkReadLargeTCP reads 1 MiB binary messages, four at a time, as
// scenario d's server does.
func BenchmarkReadLargeTCP(b *testing.B) {
	benchmarkReadTCP(b, 1<<20, 4)
}

func benchmarkReadTCP(b *testing.B, size, batched int) {
	for _, mode := range []struct {
		name    string
		netpoll bool
	}{{"goroutine", false}, {"netpoll", true}} {
		b.Run(mode.name, func(b *testing.B) {
			f := frame(0x82, repeat("a", size))
			var batch []byte
			for range batched {
				batch = append(batch, f...)
			}
			a, s := tcpPair(b)
			h := &countHandler{want: b.N, done: make(chan struct{})}
			c := newConn(s, newConfig(Options{Netpoll: mode.netpoll, MaxMessageSize: 2 << 20}, true), h, true, nil, "")
			b.ReportAllocs()
			b.SetBytes(int64(len(f)))
			b.ResetTimer()
			go c.ReadLoop()
			go func() {
				for left := b.N; left > 0; left -= batched {
					if _, err := a.Write(batch); err != nil {
						return
					}
				}
			}()
			<-h.done
			b.StopTimer()
			a.Close()
			c.CloseNow()
		})
	}
}
