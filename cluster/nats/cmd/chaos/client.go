package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
)

// clientKind tells what a client is there for.
type clientKind uint8

const (
	regular clientKind = iota // one of -clients (the first -senders send too): joined with nothing kept before the first publish
	forged                    // joined in the forged phase with a since made up (forgery says how)
	watcher                   // follows an instance's beat topic, to see what it published late
)

// client is one WebSocket client. It follows the client's rule: it keeps
// the epoch of the last recovered or gap notice and the sequence of the
// last message, passes them back (since=EPOCH:SEQ) when it connects again,
// and on a gap notice with reset drops what it kept of the topic and
// expects the history anew from its start: a new segment. A sender (snd)
// sends messages to its topic on the same connection (sender.go).
type client struct {
	gust.BuiltinEventHandler
	r       *runner
	id      int
	kind    clientKind
	topic   int    // regular and forged: the publisher's topic; watcher: the instance
	name    string // the topic's name
	since   string // forged: the position it first joins with
	forgery string // forged: which lie

	mu          sync.Mutex
	conn        *gust.Conn
	home        int      // the instance of conn, or of the last one
	joined      bool     // dialed once: a forged client lies once
	epoch       string   // of the last recovered or gap notice
	seg         *segment // what it keeps now; nil before anything came
	segs        []*segment
	fresh       bool // dialed keeping nothing: the next message begins a segment
	resets      []resetNote
	live        bool      // conn has sent its recovered notice
	downAt      time.Time // the disconnection under recovery; zero when none
	downPhase   int
	recoveries  []recovery
	disconnects []int // by phase
	failedDials int
	gaps        []uint64 // gap notices without reset, by phase
	foreign     uint64   // messages of another topic, or unreadable
	lastArrival time.Time
	maxPause    []time.Duration // by phase: the longest time between two messages
	recoveredAt time.Time       // the last recovered notice
	duplicated  []uint64        // by phase
	outOfOrder  []uint64        // by phase
	late        []lateBeat      // watcher: beats that came more than a second after they were published
	delivery    [][]uint32      // regular: by phase received in, first send (or Hub.Publish) to arrival, in µs
	snd         *sender         // nil unless it sends
}

type resetNote struct {
	epoch string
	at    time.Time
	phase int
}

type recovery struct {
	phase int // of the disconnection
	d     time.Duration
}

type lateBeat struct {
	phase int
	d     time.Duration
}

// segment is what a client keeps of its topic's history from where it
// began: its first join, a connection made keeping nothing, or a reset.
type segment struct {
	epoch        string // "" until a notice names it
	began        time.Time
	reset        bool // begun by a gap notice with reset
	recovered    time.Time
	nAtRecovered int    // messages received before that notice
	switched     uint64 // recovered notices naming another epoch than the segment's, without a reset

	bySrc    map[uint32]*sourceSeen // per source (the publisher, each sender): its counters received
	arrivals []arrival              // in the order received
	lastSeq  uint64

	ended        bool
	endedAt      time.Time
	endedBy      string // the epoch of the reset that ended it; "" for a connection made keeping nothing
	endedByReset bool
}

// sourceSeen is what a segment received of one source's messages.
type sourceSeen struct {
	seen bitset // counters received
	maxK uint32
}

// arrival is a message as a client got it: its source and counter there,
// the sequence the history gave it (all well below 2^32 in a run), and the
// attempt of a sender's that was stored.
type arrival struct {
	src, k, seq uint32
	attempt     uint8
}

// maxCounter bounds the counters a client believes: more is not a
// source's.
const maxCounter = 1 << 24

// message counts the message numbered seq carrying source src's counter k
// (sent at attempt, for a sender's), and reports whether it is a duplicate
// (that counter of that source again) or out of order (a sequence lower
// than one before, or a counter lower than one before of its source).
func (s *segment) message(seq uint64, src, k uint32, attempt uint8) (dup, outOfOrder bool) {
	ss := s.bySrc[src]
	if ss == nil {
		if s.bySrc == nil {
			s.bySrc = make(map[uint32]*sourceSeen)
		}
		ss = &sourceSeen{}
		s.bySrc[src] = ss
	}
	switch {
	case ss.seen.has(uint64(k)):
		dup = true
	case seq <= s.lastSeq || k < ss.maxK:
		outOfOrder = true
	}
	ss.seen.set(uint64(k))
	s.arrivals = append(s.arrivals, arrival{src, k, uint32(min(seq, 1<<32-1)), attempt})
	s.lastSeq = max(s.lastSeq, seq)
	ss.maxK = max(ss.maxK, k)
	return dup, outOfOrder
}

// bitset is a set of small numbers: the counters of a topic's messages.
type bitset []uint64

func (b *bitset) set(n uint64) {
	i := int(n / 64)
	if i >= len(*b) {
		*b = slices.Grow(*b, i+1-len(*b))[:i+1]
	}
	(*b)[i] |= 1 << (n % 64)
}

func (b bitset) has(n uint64) bool {
	i := int(n / 64)
	return i < len(b) && b[i]&(1<<(n%64)) != 0
}

// frame is a message of hub.FrameJSON (a message, a gap, with reset or
// not, or a recovered notice), or a sender's acknowledgement
// ({"ack":ID,"seq":N,"epoch":E}). The publisher's payloads are
// {"n":K,"at":MICROSECONDS}, as are an instance's beats; a sender's, as
// its instance stored them, {"from":NAME,"id":ID,"n":K,"at":MICROSECONDS,"a":ATTEMPT}.
type frame struct {
	Topic     string  `json:"topic"`
	Seq       uint64  `json:"seq"`
	Gap       *uint64 `json:"gap"`
	Recovered *uint64 `json:"recovered"`
	Epoch     string  `json:"epoch"`
	Reset     bool    `json:"reset"`
	Ack       *string `json:"ack"`
	Data      struct {
		From    string `json:"from"`
		N       uint64 `json:"n"`
		At      int64  `json:"at"`
		Attempt uint64 `json:"a"`
	} `json:"data"`
}

func newClient(r *runner, id int, kind clientKind, topic int, name string, home int) *client {
	n := len(r.phases)
	return &client{r: r, id: id, kind: kind, topic: topic, name: name, home: home,
		disconnects: make([]int, n), gaps: make([]uint64, n), maxPause: make([]time.Duration, n),
		duplicated: make([]uint64, n), outOfOrder: make([]uint64, n), delivery: make([][]uint32, n)}
}

func (cl *client) OnMessage(c *gust.Conn, m *gust.Message) {
	var f frame
	err := json.Unmarshal(m.Data, &f)
	m.Close()
	now := time.Now()
	phase := int(cl.r.phase.Load())
	cl.mu.Lock()
	defer cl.mu.Unlock()
	switch {
	case err == nil && f.Ack != nil && cl.snd != nil && c == cl.conn:
		cl.snd.acked(cl, *f.Ack, hub.Position{Epoch: f.Epoch, Seq: f.Seq}, now)
	case err != nil || f.Topic != cl.name:
		cl.foreign++
	case f.Gap != nil && f.Reset:
		// Drop what was kept: the history starts over from here.
		cl.resets = append(cl.resets, resetNote{f.Epoch, now, phase})
		cl.begin(f.Epoch, now, true)
		cl.epoch = f.Epoch
	case f.Gap != nil:
		cl.gaps[phase]++
		cl.epoch = f.Epoch
		cl.r.logOdd(fmt.Sprintf("client %d (%s, instance %d): a gap notice without reset after seq %d", cl.id, f.Topic, cl.home, *f.Gap))
	case f.Recovered != nil:
		if cl.seg == nil || cl.fresh {
			cl.begin("", now, false)
		}
		s := cl.seg
		switch {
		case s.epoch == "":
			s.epoch = f.Epoch
		case s.epoch != f.Epoch:
			s.switched++
			cl.r.logOdd(fmt.Sprintf("client %d (%s, instance %d): recovered in epoch %s, keeping %s, without a reset", cl.id, f.Topic, cl.home, f.Epoch, s.epoch))
		}
		cl.epoch = f.Epoch
		if s.recovered.IsZero() {
			s.recovered, s.nAtRecovered = now, len(s.arrivals)
		}
		cl.live, cl.recoveredAt = true, now
		if !cl.downAt.IsZero() {
			cl.recoveries = append(cl.recoveries, recovery{cl.downPhase, now.Sub(cl.downAt)})
			cl.downAt = time.Time{}
		}
	case f.Data.N == 0 || f.Data.N > maxCounter:
		cl.foreign++
	default:
		src, ok := cl.r.source(f.Data.From)
		if !ok {
			cl.foreign++
			return
		}
		if cl.seg == nil || cl.fresh {
			cl.begin("", now, false)
		}
		last := cl.seg.lastSeq
		dup, ooo := cl.seg.message(f.Seq, src, uint32(f.Data.N), uint8(min(f.Data.Attempt, 255)))
		if dup {
			cl.duplicated[phase]++
			cl.r.logOdd(fmt.Sprintf("duplicate: client %d (%s, instance %d, %v after its recovered notice): %s#%d seq %d again, last seq %d",
				cl.id, f.Topic, cl.home, now.Sub(cl.recoveredAt).Round(time.Microsecond), f.Data.From, f.Data.N, f.Seq, last))
		}
		if ooo {
			cl.outOfOrder[phase]++
			cl.r.logOdd(fmt.Sprintf("out of order: client %d (%s, instance %d): %s#%d seq %d after seq %d", cl.id, f.Topic, cl.home, f.Data.From, f.Data.N, f.Seq, last))
		}
		if cl.kind == regular && f.Data.At > 0 {
			d := now.Sub(time.UnixMicro(f.Data.At)).Microseconds()
			cl.delivery[phase] = append(cl.delivery[phase], uint32(min(max(d, 0), 1<<32-1)))
		}
		if cl.kind == watcher && f.Data.At > 0 {
			if d := now.Sub(time.UnixMicro(f.Data.At)); d > time.Second {
				cl.late = append(cl.late, lateBeat{phase, d})
			}
		}
		if cl.kind == regular {
			if !cl.lastArrival.IsZero() {
				cl.maxPause[phase] = max(cl.maxPause[phase], now.Sub(cl.lastArrival))
			}
			cl.lastArrival = now
		}
	}
}

// begin starts a new segment of epoch ("" when not known yet), ending the
// current one.
func (cl *client) begin(epoch string, now time.Time, reset bool) {
	if s := cl.seg; s != nil && !s.ended {
		s.ended, s.endedAt, s.endedBy, s.endedByReset = true, now, epoch, reset
	}
	cl.seg = &segment{epoch: epoch, began: now, reset: reset}
	cl.segs = append(cl.segs, cl.seg)
	cl.fresh = false
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
		cl.downPhase = int(cl.r.phase.Load())
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

// position is what the client passes back when it connects: the epoch of
// the last notice and the sequence of the last message it keeps, or the
// zero position ("") when it keeps none; a forged client's lie the first
// time.
func (cl *client) position() (since string, keepsNothing bool) {
	switch {
	case cl.kind == forged && !cl.joined:
		return cl.since, false
	case cl.seg == nil || cl.seg.lastSeq == 0:
		return "", true
	}
	return hub.Position{Epoch: cl.epoch, Seq: cl.seg.lastSeq}.String(), false
}

// dial connects to instance i with the client's position and starts the
// connection's read loop.
func (cl *client) dial(i int) error {
	cl.mu.Lock()
	since, nothing := cl.position()
	cl.mu.Unlock()
	u := "ws://" + cl.r.addrs[i] + "/ws?topic=" + url.QueryEscape(cl.name) + "&since=" + url.QueryEscape(since)
	if cl.snd != nil {
		u += "&sender=" + url.QueryEscape(cl.snd.name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := gust.Dial(ctx, u, cl, &gust.DialOptions{Options: gust.Options{PingInterval: cl.r.cfg.ClientPing}})
	if err != nil {
		return err
	}
	cl.mu.Lock()
	// Nothing is read before ReadLoop: the state is set for what comes.
	cl.conn, cl.home, cl.joined = c, i, true
	if nothing {
		cl.fresh = true
	}
	if cl.snd != nil {
		// What waits, in order, before anything new: under cl.mu, which
		// a new message takes too.
		cl.snd.resend(c)
	}
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

// drop cuts the client's connection without a close handshake, as a
// network failure would: it reconnects (the burst phase).
func (cl *client) drop() {
	cl.mu.Lock()
	c := cl.conn
	cl.mu.Unlock()
	if c != nil {
		c.CloseNow()
	}
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

// caughtUp tells whether the client is connected, recovered, in epoch and
// has got the message at sequence seq (0: nothing to have).
func (cl *client) caughtUp(epoch string, seq uint64) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.live && (seq == 0 || cl.seg != nil && cl.seg.epoch == epoch && cl.seg.lastSeq >= seq)
}

func beatTopic(i int) string { return "beat-" + strconv.Itoa(i) }
