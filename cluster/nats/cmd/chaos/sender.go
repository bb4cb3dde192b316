package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
)

// sender is what a client that sends keeps, as examples/chat's page does:
// every message it wrote, until the instance acknowledges it. It numbers
// its messages K = 1, 2, ... and sends each as
// {"id":"K","n":K,"at":MICROSECONDS,"a":ATTEMPT} on its connection (at:
// the first attempt, the same in every attempt). When it connects again
// it sends every message not acknowledged, in order, before anything new:
// the instance publishes with Hub.PublishOnce under name/K, so a message
// stored before is acknowledged with the first copy's position, and one
// that was not is stored then. Its fields are guarded by its client's mu.
type sender struct {
	index int
	name  string // "s" and its index: the connection's &sender=
	src   uint32 // its source number in the ledger
	topic int
	msgs  []sentMsg // message K at K-1
	odd   uint64    // acknowledgements of nothing it sent, or of a message acknowledged already at another position
}

// sentMsg is one of a sender's messages.
type sentMsg struct {
	made     time.Time // the sender wrote it, connected or not
	first    time.Time // first written on a connection; zero until then
	ackAt    time.Time
	pos      hub.Position // where the acknowledgement says it is stored
	attempts uint16       // times written on a connection
	ackedOn  uint16       // the attempt acknowledged (written on the connection the ack came on); 0: none yet
	phase    uint8        // made in
}

func newSender(index, topic int) *sender {
	return &sender{index: index, name: "s" + strconv.Itoa(index), src: uint32(index) + 1, topic: topic}
}

// source returns the source number of the messages a client receives from
// the sender named from ("": the publisher).
func (r *runner) source(from string) (uint32, bool) {
	if from == "" {
		return sourcePublisher, true
	}
	s, ok := strings.CutPrefix(from, "s")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || i >= len(r.senders) {
		return 0, false
	}
	return uint32(i) + 1, true
}

// send makes every sender send rate/senders messages a second from start
// until halt closes: sender s's message K is due at
// start + ((K-1)·senders + s)/rate, and one held up catches up at once.
func (r *runner) send(start time.Time, rate float64, halt <-chan struct{}) {
	var wg sync.WaitGroup
	n := uint64(len(r.senders))
	for s, cl := range r.senders {
		wg.Go(func() {
			for k := uint64(1); ; k++ {
				due := start.Add(time.Duration(float64((k-1)*n+uint64(s)) / rate * float64(time.Second)))
				select {
				case <-halt:
					return
				case <-time.After(time.Until(due)):
				}
				cl.sendNext()
			}
		})
	}
	wg.Wait()
}

// sendNext makes the sender's next message and writes it, if connected: a
// message made while it is not waits for the next connection.
func (cl *client) sendNext() {
	now := time.Now()
	phase := int(cl.r.phase.Load())
	cl.mu.Lock()
	defer cl.mu.Unlock()
	s := cl.snd
	k := len(s.msgs) + 1
	cl.r.ledger.add(s.topic, s.src, uint32(k), now, phase)
	s.msgs = append(s.msgs, sentMsg{made: now, phase: uint8(phase)})
	if cl.conn != nil {
		s.write(cl.conn, k, now)
	}
}

// resend writes on c, a new connection, every message not acknowledged,
// in order.
func (s *sender) resend(c *gust.Conn) {
	now := time.Now()
	for i := range s.msgs {
		if s.msgs[i].ackedOn == 0 {
			s.write(c, i+1, now)
		}
	}
}

// write queues message k on c. A connection that has closed takes nothing:
// the next one gets the message.
func (s *sender) write(c *gust.Conn, k int, now time.Time) {
	m := &s.msgs[k-1]
	first := m.first
	if first.IsZero() {
		first = now
	}
	p := fmt.Appendf(nil, `{"id":"%d","n":%d,"at":%d,"a":%d}`, k, k, first.UnixMicro(), m.attempts+1)
	if c.WriteAsync(gust.OpText, p, nil) != nil {
		return
	}
	m.first = first
	m.attempts++
}

// acked takes the acknowledgement of message id, stored at pos: it
// stops resending it, and the ledger learns where it is.
func (s *sender) acked(cl *client, id string, pos hub.Position, now time.Time) {
	k, err := strconv.Atoi(id)
	if err != nil || k < 1 || k > len(s.msgs) || s.msgs[k-1].attempts == 0 {
		s.odd++
		cl.r.logOdd(fmt.Sprintf("sender %s: an acknowledgement of %q, which it did not send", s.name, id))
		return
	}
	m := &s.msgs[k-1]
	if m.ackedOn != 0 {
		if m.pos != pos {
			s.odd++
			cl.r.logOdd(fmt.Sprintf("sender %s: #%d acknowledged at %v, then at %v", s.name, k, m.pos, pos))
		}
		return
	}
	m.ackAt, m.pos, m.ackedOn = now, pos, m.attempts
	cl.r.ledger.settle(s.topic, s.src, uint32(k), pos, nil)
}
