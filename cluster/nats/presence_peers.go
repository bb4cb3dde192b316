package gustnats

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
)

// What the instances say to each other: the run goroutine receives their
// messages, heartbeats, drops the unheard, asks and answers.

// peer is another instance, as heard.
type peer struct {
	epoch   uint64
	heard   time.Time
	topics  map[string]map[string]struct{} // its members of the followed topics
	partial map[string][]string            // a state entry whose members go on
}

// query is a follow's question to every instance: done when each instance
// known then has answered (and the discovery after a start or reconnect
// is over), or at its deadline.
type query struct {
	wait     map[string]struct{}
	deadline time.Time
	ready    chan struct{}
	done     bool
}

// heldQuery is a question whose answer waits for the end of a
// ResumeGrace.
type heldQuery struct {
	reply  string
	qid    uint64
	topics []string
}

// run receives the presence messages and the connection's status changes,
// heartbeats, expires unheard instances and ends queries at their
// deadlines, until Close.
func (p *Presence) run() {
	defer close(p.exited)
	timer := time.NewTimer(p.heartbeat)
	defer timer.Stop()
	for {
		select {
		case <-p.done:
			return
		case m := <-p.ch:
			p.receive(m)
		case s := <-p.status:
			p.statusChanged(s)
		case <-p.wake:
		case <-timer.C:
		}
		timer.Reset(time.Until(p.tick()))
	}
}

// caughtUp is the first thing run does under p.mu each time (the time is
// read under p.mu, so that a wait for it counts): p.wakeAt is when run
// meant to run at the latest. Up to half p.lateLimit late is a busy
// machine's timer and counts for nothing, so that a dead instance is
// dropped on time; past that, whatever made run late (SIGSTOP, a paused
// container, a starved process, a long wait for p.mu) kept the instance
// deaf too. That time, past the half, is not the others' silence: their
// clocks move on by as much, so that their heartbeats, waiting unread in
// the queue or the socket, are read before any is dropped as unheard.
//
// Late by p.lateLimit or more, the instance may have been dropped by the
// others (its heartbeats stopped too): they ask it for its members when
// they hear it again. Its answers wait for p.resumeGrace, so that the
// connections that closed meanwhile are seen closed first (their Leave
// calls come as their read loops wake) and the others get joins for the
// members still there only. A later stop during the grace starts it anew.
// p.mu held.
func (p *Presence) caughtUp(now time.Time) {
	late := now.Sub(p.wakeAt)
	if late <= p.lateLimit/2 {
		return
	}
	p.wakeAt = now
	deaf := late - p.lateLimit/2
	for _, pr := range p.peers {
		if pr.heard = pr.heard.Add(deaf); pr.heard.After(now) {
			pr.heard = now
		}
	}
	if late >= p.lateLimit {
		p.holdUntil = now.Add(p.resumeGrace)
		p.log(slog.LevelInfo, "gust: presence: the instance did not run for a while: holding its members back from the others for ResumeGrace",
			slog.Duration("late", late), slog.Duration("grace", p.resumeGrace))
	}
}

// tick does what is due now and returns when to come back.
func (p *Presence) tick() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.closed || p.connClosed {
		return now.Add(time.Hour)
	}
	p.caughtUp(now)
	if !now.Before(p.nextBeat) {
		p.nextBeat = now.Add(p.heartbeat)
		p.publish(p.prefix+"hb", encodeHeartbeat(p.id, p.epoch, false))
		// Back-ups for a status change that nats.go dropped (its channel
		// holds ten) and for messages lost to a full queue.
		if r := p.nc.Stats().Reconnects; r != p.reconnects {
			p.reconnected()
		}
		if n := p.droppedNow(); n != p.dropped {
			lost := n > p.dropped // less: a subscription with drops ended
			p.dropped = n
			if lost {
				p.log(slog.LevelInfo, "gust: presence: messages were lost (slow consumer): asking every instance again")
				p.ask(p.prefix + "q")
			}
		}
	}
	next := p.nextBeat
	if len(p.held) > 0 {
		if now.Before(p.holdUntil) {
			next = p.holdUntil
		} else {
			for _, q := range p.held {
				p.answer(q.reply, q.qid, q.topics)
			}
			p.held = nil
		}
	}
	// Silence is no evidence while this instance cannot hear: expire
	// only when connected (a reconnect restarts every peer's clock).
	if p.nc.IsConnected() {
		for id, pr := range p.peers {
			if end := pr.heard.Add(p.expiry); !now.Before(end) {
				p.log(slog.LevelWarn, "gust: presence: instance unheard past Expiry: dropping its members", slog.String("instance", id))
				p.dropPeer(id)
			} else if end.Before(next) {
				next = end
			}
		}
	}
	for qid, q := range p.queries {
		// A late answer needs no record: its states apply all the same.
		if p.check(q, now); q.done {
			delete(p.queries, qid)
			continue
		}
		due := q.deadline
		if len(q.wait) == 0 && p.discover.Before(due) {
			due = p.discover
		}
		if due.Before(next) {
			next = due
		}
	}
	p.wakeAt = next
	return next
}

// receive applies one message from another instance.
func (p *Presence) receive(m *nats.Msg) {
	msg, ok, err := decodePresence(m.Data)
	if err != nil {
		p.log(slog.LevelWarn, "gust: presence: ignoring a malformed message", slog.String("subject", m.Subject), slog.Any("err", err))
		return
	}
	if !ok || msg.from == p.id {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.connClosed {
		return
	}
	now := time.Now()
	p.caughtUp(now)
	if msg.kind == kindBye {
		p.dropPeer(msg.from)
		return
	}
	// A hello of epoch 0 is a Presence just made: it has no members yet.
	pr := p.heard(msg.from, msg.epoch, msg.kind == kindHeartbeat && msg.hello && msg.epoch == 0, now)
	switch msg.kind {
	case kindHeartbeat:
		if msg.hello {
			p.publish(p.prefix+"i."+msg.from, encodeHeartbeat(p.id, p.epoch, false))
		}
	case kindJoin:
		if p.topics[msg.topic] != nil {
			p.addMember(pr, msg.topic, msg.member)
		}
	case kindLeave:
		if p.topics[msg.topic] != nil {
			p.removeMember(pr, msg.topic, msg.member)
		}
	case kindQuery:
		if m.Reply == "" {
			break
		}
		if now.Before(p.holdUntil) {
			p.held = append(p.held, heldQuery{m.Reply, msg.qid, msg.topics})
		} else {
			p.answer(m.Reply, msg.qid, msg.topics)
		}
	case kindState:
		for _, s := range msg.states {
			p.applyState(pr, s)
		}
		if q := p.queries[msg.qid]; q != nil && msg.last {
			delete(q.wait, msg.from)
			p.check(q, now)
		}
	}
}

// heard notes a message from instance id at now; one not known (unless
// new), or back with a new epoch, is asked for its members of the followed
// topics; p.mu held.
func (p *Presence) heard(id string, epoch uint64, new bool, now time.Time) *peer {
	pr := p.peers[id]
	if pr == nil || pr.epoch != epoch {
		if pr == nil {
			pr = &peer{topics: make(map[string]map[string]struct{}), partial: make(map[string][]string)}
			p.peers[id] = pr
		}
		pr.epoch = epoch
		if !new {
			p.ask(p.prefix + "i." + id)
		}
	}
	pr.heard = now
	return pr
}

// answer sends this instance's members of topics to reply; p.mu held, so
// that no change of this instance comes between its messages.
func (p *Presence) answer(reply string, qid uint64, topics []string) {
	e := newStateEncoder(p.id, p.epoch, qid, msgLimit)
	for _, topic := range topics {
		var members []string
		if t := p.topics[topic]; t != nil {
			members = slices.Collect(maps.Keys(t.local))
		}
		e.add(topic, members)
	}
	for _, m := range e.finish() {
		p.publish(reply, m)
	}
}

// applyState replaces pr's members of a followed topic with those of a
// state entry (gathered over several messages when it goes on); p.mu held.
func (p *Presence) applyState(pr *peer, s topicState) {
	if p.topics[s.topic] == nil {
		return
	}
	members := append(pr.partial[s.topic], s.members...)
	if s.more {
		pr.partial[s.topic] = members
		return
	}
	delete(pr.partial, s.topic)
	now := make(map[string]struct{}, len(members))
	for _, m := range members {
		now[m] = struct{}{}
	}
	for m := range pr.topics[s.topic] {
		if _, ok := now[m]; !ok {
			p.removeMember(pr, s.topic, m)
		}
	}
	for m := range now {
		p.addMember(pr, s.topic, m)
	}
}

func (p *Presence) addMember(pr *peer, topic, member string) {
	set := pr.topics[topic]
	if set == nil {
		set = make(map[string]struct{})
		pr.topics[topic] = set
	}
	if _, ok := set[member]; !ok {
		set[member] = struct{}{}
		p.view.Join(topic, member)
	}
}

func (p *Presence) removeMember(pr *peer, topic, member string) {
	set := pr.topics[topic]
	if _, ok := set[member]; ok {
		delete(set, member)
		if len(set) == 0 {
			delete(pr.topics, topic)
		}
		p.view.Leave(topic, member)
	}
}

// dropPeer forgets an instance and its members; p.mu held.
func (p *Presence) dropPeer(id string) {
	pr := p.peers[id]
	if pr == nil {
		return
	}
	delete(p.peers, id)
	for topic, set := range pr.topics {
		for m := range set {
			p.view.Leave(topic, m)
		}
	}
	now := time.Now()
	for _, q := range p.queries {
		delete(q.wait, id)
		p.check(q, now)
	}
}

func (p *Presence) statusChanged(s nats.Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.connClosed {
		return
	}
	p.caughtUp(time.Now()) // before a reconnect, whose new epoch makes the others ask
	switch s {
	case nats.CONNECTED:
		p.reconnected()
	case nats.CLOSED:
		// Nothing will be heard again: the others' members would be
		// ghosts. Local members stay in the view.
		p.connClosed = true
		for id := range p.peers {
			p.dropPeer(id)
		}
		for _, q := range p.queries {
			p.finish(q)
		}
	}
}

// reconnected starts a new epoch: the others ask this instance for its
// members again (what it sent while away may be lost), and it asks them
// for theirs (it missed their changes); p.mu held.
func (p *Presence) reconnected() {
	p.reconnects = p.nc.Stats().Reconnects
	p.epoch++
	now := time.Now()
	for _, pr := range p.peers {
		pr.heard = now
	}
	p.discover = now.Add(p.snapshotTimeout)
	p.nextBeat = now.Add(p.heartbeat)
	p.log(slog.LevelInfo, "gust: presence: reconnected: asking every instance again")
	p.publish(p.prefix+"hb", encodeHeartbeat(p.id, p.epoch, true))
	p.ask(p.prefix + "q")
}

// ask sends a query for every followed topic to subject (one instance's,
// or every instance's), without waiting for the answers; p.mu held.
func (p *Presence) ask(subject string) {
	if len(p.topics) == 0 {
		return
	}
	msgs, _ := encodeQueries(p.id, p.epoch, slices.Collect(maps.Keys(p.topics)), msgLimit, p.nextQID)
	for _, m := range msgs {
		p.nc.PublishRequest(subject, p.inbox, m)
	}
}

// check finishes q if every instance it waits for has answered and the
// discovery is over, or at its deadline; p.mu held.
func (p *Presence) check(q *query, now time.Time) {
	if !q.done && (len(q.wait) == 0 && !now.Before(p.discover) || !now.Before(q.deadline)) {
		p.finish(q)
	}
}

func (p *Presence) finish(q *query) {
	if !q.done {
		q.done = true
		close(q.ready)
	}
}

func (p *Presence) droppedNow() int {
	n := 0
	for _, s := range p.subs {
		if d, err := s.Dropped(); err == nil {
			n += d
		}
	}
	for _, t := range p.topics {
		if d, err := t.sub.Dropped(); err == nil {
			n += d
		}
	}
	return n
}

// poke makes run recompute its timer.
func (p *Presence) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *Presence) nextQID() uint64 {
	p.qid++
	return p.qid
}

func (p *Presence) log(level slog.Level, msg string, attrs ...slog.Attr) {
	l := p.logger
	if l == nil {
		l = slog.Default()
	}
	l.LogAttrs(context.Background(), level, msg, append(attrs, slog.String("presence", p.id))...)
}
