package servers

import (
	"bufio"
	"net"
)

// bcast-raw: the floor for a broadcast that makes one write per delivery. Raw TCP after the
// minimal handshake (see raw.go); the publisher writes one pre-framed message to every
// connection in turn with net.Conn.Write, from one goroutine, with no queue, no lock and no
// flow control beyond the write blocking. What a client sends is echoed as raw-record
// echoes it (each Write is whole, so an echo never splits a broadcast frame), which makes it an
// echo server like the others until the broadcast starts. Not a library a server could use as
// is (a stalled client stalls everyone): the reference the others are measured against.

func init() {
	register("bcast-raw", "broadcast: raw TCP, one pre-framed write per connection in a loop (the one-write-per-delivery floor)", func(addr string) (Server, error) {
		return startRawBroadcast(addr)
	})
}

func startRawBroadcast(addr string) (Server, error) {
	cfg := bcastConfigFromEnv()
	var frames [][]byte
	for _, payload := range newBcastFeed(cfg.size).msgs {
		frame := make([]byte, headerLen(len(payload)), headerLen(len(payload))+len(payload))
		putHeader(frame, 0x1, len(payload))
		frames = append(frames, append(frame, payload...))
	}
	trigger := &bcastTrigger{cfg: cfg}
	conns := &connSet[*net.TCPConn]{}
	trigger.run = func(stop func() bool) {
		for round := 0; trigger.pace(nil, 0, stop); round++ {
			frame := frames[round%len(frames)]
			for _, c := range conns.list() {
				_, _ = c.Write(frame) // a failed write: the reader below sees the end too
			}
		}
	}
	return serveRaw(addr, func(c *net.TCPConn, br *bufio.Reader) error {
		conns.add(c)
		trigger.opened()
		defer func() {
			conns.remove(c)
			trigger.closed()
		}()
		return rawRecord(c, br)
	})
}
