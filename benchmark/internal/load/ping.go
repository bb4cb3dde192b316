package load

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config.PingAtEnd: after the idle hold, every connection sends a ping whose payload is its
// connection number and waits for the pong that echoes it (RFC 6455 §5.5.3). All the pings are
// written first, then the pongs are read, so that the server sees every connection wake at once.

// pingWorkers is the number of goroutines that write the pings and, when no reader goroutine
// runs, read the pongs.
const pingWorkers = 64

// afterDeadline is how long a connection still waits for bytes once the round's deadline has
// passed: a pong already in its socket is counted, and a server that answers nothing costs at
// most this per connection beyond the deadline.
const afterDeadline = 2 * time.Millisecond

// pingAtEnd runs the round and fills in the result: the pongs, the seconds the round took, and
// the server's RSS, heap and goroutines once it is over. It fails unless every connection
// answered.
func (r *runner) pingAtEnd(res *Result, readers bool) error {
	answered, elapsed, err := r.pingAll(r.cfg.PingTimeout, readers)
	res.PingsAnswered, res.PingSeconds = answered, elapsed.Seconds()
	if err != nil {
		return err
	}
	// In netpoll mode a connection's goroutine exits once the connection is idle again: give
	// the last ones a moment before counting.
	time.Sleep(500 * time.Millisecond)
	if r.cfg.ServerPID > 0 {
		rss, err := procRSS(r.cfg.ServerPID)
		if err != nil {
			return err
		}
		res.ServerRSSAfterPingKB = rss
	}
	if r.cfg.StatsURL != "" {
		s, err := fetchStats(r.cfg.StatsURL, 1)
		if err != nil {
			return err
		}
		res.ServerHeapAfterPingKB = float64(s.HeapInuse) / 1024
		res.ServerGoroutinesAfterPing = s.Goroutines
	}
	return nil
}

// pingAll writes a ping on every connection and then waits for every pong, timeout in all. With
// readers, each connection's readLoop runs and sees its pong; otherwise the pongs are read here.
// It returns the pongs received and the time from the first ping written to the last pong read.
func (r *runner) pingAll(timeout time.Duration, readers bool) (int64, time.Duration, error) {
	conns := r.conns
	start := time.Now()
	deadline := start.Add(timeout)
	errs := make([]error, len(conns)) // each index is written by one worker only
	eachConn(len(conns), func(i int, _ []byte) {
		errs[i] = conns[i].sendPing(deadline)
	})
	if readers {
		for time.Now().Before(deadline) && !allPonged(conns) {
			select {
			case <-r.failed:
				return countPongs(conns), time.Since(start), fmt.Errorf("waiting for the pongs: %w", r.error())
			case <-time.After(5 * time.Millisecond):
			}
		}
	} else {
		eachConn(len(conns), func(i int, buf []byte) {
			if errs[i] == nil {
				errs[i] = conns[i].awaitPong(deadline, buf)
			}
		})
	}
	elapsed := time.Since(start)
	answered := countPongs(conns)
	if int(answered) == len(conns) {
		return answered, elapsed, nil
	}
	var closed, silent, other int
	var first error
	for i, c := range conns {
		if c.ponged.Load() {
			continue
		}
		err := errs[i]
		switch {
		case err == nil || isTimeout(err):
			silent++
		case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
			closed++
		default:
			other++
		}
		if first == nil {
			if err == nil {
				err = errors.New("no pong")
			}
			first = fmt.Errorf("connection %d: %w", c.id, err)
		}
	}
	return answered, elapsed, fmt.Errorf("ping at the end: %d of %d connections answered within %v (%d silent, %d closed by the server, %d other errors; first: %v)",
		answered, len(conns), timeout, silent, closed, other, first)
}

// eachConn calls f for 0..n-1 on pingWorkers goroutines, each with a buffer of its own.
func eachConn(n int, f func(i int, buf []byte)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(pingWorkers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 512)
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i, buf)
			}
		}()
	}
	wg.Wait()
}

func allPonged(conns []*wsConn) bool {
	for _, c := range conns {
		if !c.ponged.Load() {
			return false
		}
	}
	return true
}

func countPongs(conns []*wsConn) int64 {
	var n int64
	for _, c := range conns {
		if c.ponged.Load() {
			n++
		}
	}
	return n
}

// pingPayload is the payload of connection id's ping: its number, 8 bytes big-endian.
func pingPayload(id int) [8]byte {
	var p [8]byte
	binary.BigEndian.PutUint64(p[:], uint64(id))
	return p
}

// sendPing writes the connection's ping, masked like every client frame.
func (c *wsConn) sendPing(deadline time.Time) error {
	p := pingPayload(c.id)
	frame := appendHeader(make([]byte, 0, 14), opPing, len(p), true, c.key)
	off := len(frame)
	frame = append(frame, p[:]...)
	maskBytes(c.key, 0, frame[off:])
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(deadline)
	_, err := c.nc.Write(frame)
	return err
}

// gotPong is called with the payload of every pong the connection reads.
func (c *wsConn) gotPong(p []byte) {
	if want := pingPayload(c.id); string(p) == string(want[:]) {
		c.ponged.Store(true)
	}
}

// awaitPong reads frames until the connection's pong arrives, the deadline passes, or the
// connection fails. The frames go through process, as readLoop's do: a ping from the server is
// answered, a close frame or anything the server should not send is an error.
func (c *wsConn) awaitPong(deadline time.Time, buf []byte) error {
	n := copy(buf, c.leftover)
	c.leftover = nil
	var st readState
	for {
		if n > 0 {
			used, _, _, err := c.process(buf[:n], &st, 0, c.r.now())
			if err != nil {
				return err
			}
			n = copy(buf, buf[used:n])
		}
		if c.ponged.Load() {
			return nil
		}
		_ = c.nc.SetReadDeadline(later(deadline, time.Now().Add(afterDeadline)))
		m, err := c.nc.Read(buf[n:])
		n += m
		if err != nil && m == 0 {
			return err
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
