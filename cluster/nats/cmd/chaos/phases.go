package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/gustws/gust/hub"
)

// What each phase does, for the tables.
func (r *runner) describe(name string) string {
	cfg := r.cfg
	switch name {
	case "connect":
		return "clients connect and recover; nothing published"
	case "publishing":
		return "publishing, every instance up"
	case "kill":
		if cfg.Overlap {
			return fmt.Sprintf("nothing (-overlap: instance %d is killed in phase nats)", cfg.Kill)
		}
		return fmt.Sprintf("kill -9 of instance %d: its clients reconnect to the others", cfg.Kill)
	case "nats":
		s := fmt.Sprintf("nats-server stopped with SIG%s, its store kept, started again %v later", cfg.NATSSignal, cfg.NATSDown)
		if cfg.Overlap {
			s += fmt.Sprintf("; instance %d killed while it is down", cfg.Kill)
		}
		return s
	case "burst":
		return "every client's connection cut at once: all reconnect, each to another instance"
	case "empty":
		return fmt.Sprintf("nats-server stopped with SIG%s and started again %v later on an empty store, the instances left running: a new epoch", cfg.NATSSignal, cfg.NATSDown)
	case "empty-restart":
		return "the same, every instance killed (-9) with it and started again once it is back: a new epoch"
	case "freeze":
		return fmt.Sprintf("instance %d (the one holding the most clients, unless -freeze-instance) stopped (SIGSTOP) for %v, then SIGCONT", r.frozen, cfg.Freeze)
	case "forged":
		return fmt.Sprintf("%d members of each kind join with a forged since (past the end, 2^64-1, another epoch, a lost epoch, no epoch)", cfg.Forged)
	case "drain":
		return "publishing over: waiting for every client's last message"
	}
	return name
}

// schedule publishes -phase long, then for each phase selected makes its
// event happen and publishes -phase long after it; then it stops
// publishing.
func (r *runner) schedule(ctx context.Context, selected []string) error {
	cfg := r.cfg
	start := time.Now().Add(100 * time.Millisecond)
	halt := make(chan struct{})
	published := make(chan struct{})
	go func() {
		defer close(published)
		if len(r.senders) > 0 {
			r.send(start, cfg.Rate, halt)
		} else {
			r.pub.run(start, cfg.Rate, halt)
		}
	}()
	defer func() {
		select {
		case <-halt:
		default:
			close(halt)
		}
		<-published
	}()
	sleep := func(until time.Time) error {
		select {
		case <-time.After(time.Until(until)):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.enter(1, start)
	if len(r.senders) > 0 {
		log.Printf("chaos: %d senders sending %.0f messages a second over %d topics", len(r.senders), cfg.Rate, cfg.Topics)
	} else {
		log.Printf("chaos: publishing %.0f messages a second over %d topics", cfg.Rate, cfg.Topics)
	}
	if err := sleep(start.Add(cfg.Phase)); err != nil {
		return err
	}
	for i, name := range selected {
		r.enter(2+i, time.Now())
		if err := r.act(ctx, 2+i, name); err != nil {
			return fmt.Errorf("phase %s: %w", name, err)
		}
		if err := sleep(time.Now().Add(cfg.Phase)); err != nil {
			return err
		}
	}
	close(halt)
	<-published
	r.enter(len(r.phases)-1, time.Now())
	r.mark("publishing over")
	return nil
}

// enter ends the current phase and begins phase i at at.
func (r *runner) enter(i int, at time.Time) {
	prev := r.phases[r.phase.Load()]
	prev.end = at
	prev.epoch = r.pub.broker.Epoch()
	r.phases[i].start = at
	r.phase.Store(int32(i))
	if r.phases[i].name == "freeze" && r.frozen < 0 {
		r.frozen = r.busiest()
	}
	log.Printf("chaos: phase %s: %s", r.phases[i].name, r.describe(r.phases[i].name))
}

// act makes phase i's event happen.
func (r *runner) act(ctx context.Context, i int, name string) error {
	cfg := r.cfg
	switch name {
	case "kill":
		if !cfg.Overlap {
			r.kill(cfg.Kill)
		}
	case "nats":
		o := r.stopNATS(i)
		if cfg.Overlap {
			r.kill(cfg.Kill)
		}
		return r.restartNATS(ctx, o)
	case "burst":
		r.mark("every client's connection cut")
		for _, cl := range r.clients {
			cl.drop()
		}
	case "empty", "empty-restart":
		lost := r.pub.broker.Epoch()
		o := r.stopNATS(i)
		r.lostAt[lost] = o.stop
		r.phases[i].lost = lost
		if name == "empty-restart" {
			for j, p := range r.instances {
				if !p.exited() {
					r.kill(j)
				}
			}
		}
		if err := os.RemoveAll(r.nats.dir); err != nil {
			return err
		}
		r.mark("nats-server's store removed")
		if err := r.restartNATS(ctx, o); err != nil {
			return err
		}
		if name == "empty-restart" {
			r.mark("starting the instances again")
			if err := r.startAll(ctx); err != nil {
				return err
			}
			r.mark("instances ready again")
		}
		r.newEpoch(ctx, i, lost)
	case "freeze":
		p := r.instances[r.frozen]
		if p.exited() {
			return fmt.Errorf("instance %d is not running", r.frozen)
		}
		r.mark("instance %d stopped (SIGSTOP), holding %d clients", r.frozen, r.holding(r.frozen))
		p.signal(syscall.SIGSTOP)
		select {
		case <-time.After(cfg.Freeze):
		case <-ctx.Done():
		}
		p.signal(syscall.SIGCONT)
		r.mark("instance %d continued (SIGCONT)", r.frozen)
		return ctx.Err()
	case "forged":
		return r.joinForged(ctx)
	}
	return nil
}

// holding returns the number of clients connected to instance i.
func (r *runner) holding(i int) int {
	n := 0
	for _, cl := range r.clients {
		cl.mu.Lock()
		if cl.conn != nil && cl.home == i {
			n++
		}
		cl.mu.Unlock()
	}
	return n
}

// busiest returns the running instance that holds the most clients.
func (r *runner) busiest() int {
	best, most := 0, -1
	for i, p := range r.instances {
		if n := r.holding(i); !p.exited() && n > most {
			best, most = i, n
		}
	}
	return best
}

// kill kills instance i with SIGKILL.
func (r *runner) kill(i int) {
	r.mark("kill -9 instance %d", i)
	p := r.instances[i]
	p.killed = true
	p.stop(syscall.SIGKILL, 5*time.Second)
}

// stopNATS stops nats-server with -nats-signal, for phase i.
func (r *runner) stopNATS(i int) *outage {
	sig := syscall.SIGKILL
	if r.cfg.NATSSignal == "TERM" {
		sig = syscall.SIGTERM
	}
	o := &outage{phase: i, stop: r.mark("nats-server stopped with SIG%s", r.cfg.NATSSignal)}
	if !r.nats.p.stop(sig, 10*time.Second) {
		log.Printf("chaos: nats-server did not stop in 10 s: killed")
	}
	return o
}

// restartNATS starts nats-server again -nats-down after o began, and waits
// until JetStream answers.
func (r *runner) restartNATS(ctx context.Context, o *outage) error {
	select {
	case <-time.After(time.Until(o.stop.Add(r.cfg.NATSDown))):
	case <-ctx.Done():
		return ctx.Err()
	}
	r.mark("nats-server starting again")
	if err := r.nats.start(ctx); err != nil {
		return err
	}
	o.ready = r.mark("nats-server ready again")
	r.outages = append(r.outages, *o)
	return nil
}

// newEpoch waits, at most 20 s, until the publisher's broker names an
// epoch other than lost (it makes the stream again when its connection
// comes back, if no instance did first), and records it as phase i's.
func (r *runner) newEpoch(ctx context.Context, i int, lost string) {
	err := r.waitFor(ctx, 20*time.Second, "the history's new epoch", func() bool { return r.pub.broker.Epoch() != lost })
	if err != nil {
		log.Printf("chaos: %v", err)
		return
	}
	e := r.pub.broker.Epoch()
	r.epochs = append(r.epochs, e)
	r.phases[i].anew = e
	r.mark("the history's epoch is now %s (was %s)", e, lost)
}

// forgery is a kind of forged since: a position the history never gave.
type forgery struct {
	name  string
	since func(epoch string, seq uint64) string // seq: the topic's last, at least 1
}

// forgeries returns the kinds of forged since, given the epochs the run
// lost (oldest first).
func forgeries(lost []string) []forgery {
	fs := []forgery{
		{"past the end (seq + 10^9)", func(e string, seq uint64) string {
			return hub.Position{Epoch: e, Seq: seq + 1e9}.String()
		}},
		{"2^64-1", func(e string, _ uint64) string { return hub.Position{Epoch: e, Seq: math.MaxUint64}.String() }},
		{"another epoch", func(_ string, seq uint64) string { return hub.Position{Epoch: "forged", Seq: seq}.String() }},
		{"no epoch", func(_ string, seq uint64) string { return strconv.FormatUint(seq, 10) }},
	}
	if len(lost) > 0 {
		old := lost[0]
		fs = append(fs, forgery{"a lost epoch", func(_ string, seq uint64) string { return hub.Position{Epoch: old, Seq: seq}.String() }})
	}
	return fs
}

// joinForged connects -forged members of each kind of forged since, spread
// over the topics and the instances up, each with a since made from its
// topic's last stored sequence.
func (r *runner) joinForged(ctx context.Context) error {
	epoch := r.pub.broker.Epoch()
	_, seqs := r.ledger.lastStored(epoch)
	var lost []string
	for _, e := range r.epochs {
		if _, ok := r.lostAt[e]; ok {
			lost = append(lost, e)
		}
	}
	var up []int
	for i, p := range r.instances {
		if !p.exited() {
			up = append(up, i)
		}
	}
	var joining []*client
	n := 0
	for _, f := range forgeries(lost) {
		for range r.cfg.Forged {
			t := n % r.cfg.Topics
			cl := newClient(r, len(r.clients), forged, t, topicName(t), up[n%len(up)])
			cl.forgery, cl.since = f.name, f.since(epoch, max(seqs[t], 1))
			r.clients = append(r.clients, cl)
			joining = append(joining, cl)
			n++
		}
	}
	r.mark("%d members join with a forged since", len(joining))
	return r.dialAll(ctx, joining)
}
