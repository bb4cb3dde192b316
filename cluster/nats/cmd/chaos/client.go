package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gustws/gust"
)

// The phases of a run, for the pauses and disconnections seen in each.
const (
	phaseConnect  = iota // clients connect and recover; nothing published
	phaseBefore          // publishing, all instances up
	phaseInstance        // one instance killed
	phaseNATS            // nats-server stopped and started again
	phaseDrain           // publishing over; waiting for the last messages
	phases
)

var phaseNames = [phases]string{"connect", "publishing", "after the instance kill", "after the NATS restart", "drain"}

// client is one WebSocket client: it connects to an instance, keeps the
// last sequence it received, and on a disconnection connects to another
// with it.
type client struct {
	gust.BuiltinEventHandler
	r     *runner
	id    int
	topic int

	mu          sync.Mutex
	conn        *gust.Conn
	home        int // the instance of conn, or of the last one
	tally       tally
	live        bool      // conn has sent its recovered notice
	downAt      time.Time // the disconnection under recovery; zero when none
	recoveries  []time.Duration
	disconnects [phases]int
	failedDials int
	gaps        uint64
	foreign     uint64 // messages of another topic, or unreadable
	lastArrival time.Time
	maxPause    [phases]time.Duration // the longest time between two messages
	recoveredAt time.Time             // the last recovered notice
	duplicated  [phases]uint64
}

// frame is a message of hub.FrameJSON: a message, a gap or a recovered
// notice; the publisher's payloads are {"n":K}.
type frame struct {
	Topic     string  `json:"topic"`
	Seq       uint64  `json:"seq"`
	Gap       *uint64 `json:"gap"`
	Recovered *uint64 `json:"recovered"`
	Data      struct {
		N uint64 `json:"n"`
	} `json:"data"`
}

func (cl *client) OnMessage(_ *gust.Conn, m *gust.Message) {
	var f frame
	err := json.Unmarshal(m.Data, &f)
	m.Close()
	now := time.Now()
	phase := cl.r.phase.Load()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	switch {
	case err != nil || f.Topic != topicName(cl.topic):
		cl.foreign++
	case f.Gap != nil:
		cl.gaps++
	case f.Recovered != nil:
		cl.live, cl.recoveredAt = true, now
		if !cl.downAt.IsZero() {
			cl.recoveries = append(cl.recoveries, now.Sub(cl.downAt))
			cl.downAt = time.Time{}
		}
	case f.Data.N == 0:
		cl.foreign++
	default:
		dup, last := cl.tally.duplicated, cl.tally.lastSeq
		cl.tally.message(f.Seq, f.Data.N)
		if cl.tally.duplicated > dup {
			cl.duplicated[phase]++
			cl.r.logDuplicate(fmt.Sprintf("client %d (%s, instance %d, %v after its recovered notice): #%d seq %d again, last seq %d",
				cl.id, f.Topic, cl.home, now.Sub(cl.recoveredAt).Round(time.Microsecond), f.Data.N, f.Seq, last))
		}
		if !cl.lastArrival.IsZero() {
			cl.maxPause[phase] = max(cl.maxPause[phase], now.Sub(cl.lastArrival))
		}
		cl.lastArrival = now
	}
}

func (cl *client) OnClose(c *gust.Conn, _ error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if c != cl.conn {
		return
	}
	cl.conn = nil
	if cl.r.stopping.Load() {
		return // the run is over: live tells whether it was at the end
	}
	cl.live = false
	if cl.downAt.IsZero() {
		cl.downAt = time.Now()
	}
	cl.disconnects[cl.r.phase.Load()]++
	cl.r.wg.Add(1) // by a counted goroutine: the read loop's
	go cl.reconnect()
}

// reconnect connects to the other instances in turn, with a backoff from
// 50 ms doubling to 1 s, with jitter, until one answers or the run stops.
// The clients of an instance start from different ones, so that they
// spread over those left.
func (cl *client) reconnect() {
	defer cl.r.wg.Done()
	backoff := 50 * time.Millisecond
	n := len(cl.r.addrs)
	cl.mu.Lock()
	home := cl.home + cl.id%(n-1)
	cl.mu.Unlock()
	for i := 1; ; i++ {
		select {
		case <-time.After(backoff/2 + rand.N(backoff/2)):
		case <-cl.r.stop:
			return
		}
		if cl.dial((home+i)%n) == nil {
			return
		}
		cl.mu.Lock()
		cl.failedDials++
		cl.mu.Unlock()
		backoff = min(2*backoff, time.Second)
	}
}

// dial connects to instance i, asking for the topic's messages after the
// last sequence received, and starts the connection's read loop.
func (cl *client) dial(i int) error {
	cl.mu.Lock()
	since := cl.tally.lastSeq
	cl.mu.Unlock()
	url := fmt.Sprintf("ws://%s/ws?topic=%s&since=%d", cl.r.addrs[i], topicName(cl.topic), since)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := gust.Dial(ctx, url, cl, nil)
	if err != nil {
		return err
	}
	cl.mu.Lock()
	cl.conn, cl.home = c, i
	cl.mu.Unlock()
	cl.r.wg.Add(1)
	go func() {
		defer cl.r.wg.Done()
		c.ReadLoop()
	}()
	if cl.r.stopping.Load() {
		c.CloseNow() // the run stopped while this one dialed
	}
	return nil
}

// close closes the client's connection, if any, for the end of the run.
func (cl *client) close() {
	cl.mu.Lock()
	c := cl.conn
	cl.mu.Unlock()
	if c != nil {
		c.Close(gust.StatusGoingAway, "")
	}
}

func topicName(t int) string { return fmt.Sprintf("t%d", t) }
