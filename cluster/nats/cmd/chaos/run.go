package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// config is what chaos run's flags set.
type config struct {
	Instances  int           `json:"instances"`
	Clients    int           `json:"clients"`
	Topics     int           `json:"topics"`
	Rate       float64       `json:"rate"`
	Phase      time.Duration `json:"-"`
	NATSDown   time.Duration `json:"-"`
	NATSSignal string        `json:"nats_signal"`
	Drain      time.Duration `json:"-"`
	Kill       int           `json:"killed_instance"`
	Overlap    bool          `json:"overlap"`
	Outbox     int           `json:"outbox"`
	NATSServer string        `json:"-"`
	NATSPort   int           `json:"-"`
	Port       int           `json:"-"`
	Work       string        `json:"-"`
	MD         string        `json:"-"`
}

func (c *config) flags(fs *flag.FlagSet) {
	fs.IntVar(&c.Instances, "instances", 3, "gust server processes")
	fs.IntVar(&c.Clients, "clients", 3000, "WebSocket clients, spread evenly over the topics, a topic's over the instances")
	fs.IntVar(&c.Topics, "topics", 100, "topics")
	fs.Float64Var(&c.Rate, "rate", 1000, "messages published a second, round-robin over the topics")
	fs.DurationVar(&c.Phase, "phase", 10*time.Second, "publishing before the instance kill, between it and the NATS restart, and after")
	fs.DurationVar(&c.NATSDown, "nats-down", 2*time.Second, "how long nats-server stays stopped")
	fs.StringVar(&c.NATSSignal, "nats-signal", "KILL", "how nats-server is stopped: KILL or TERM")
	fs.DurationVar(&c.Drain, "drain", 30*time.Second, "how long to wait, after the last publish, for every client to have its topic's last message")
	fs.IntVar(&c.Kill, "kill", 0, "the instance killed with SIGKILL, from 0")
	fs.BoolVar(&c.Overlap, "overlap", false, "kill the instance while nats-server is down, instead of a phase before: its clients recover on instances that are away from NATS")
	fs.IntVar(&c.Outbox, "outbox", 1024, "the instances' outbox size per connection, with OutboxCloseSlow")
	fs.StringVar(&c.NATSServer, "nats-server", "", "nats-server binary (default: this binary's embedded server, chaos nats)")
	fs.IntVar(&c.NATSPort, "nats-port", 0, "nats-server's port on 127.0.0.1 (0: a free one)")
	fs.IntVar(&c.Port, "port", 0, "the first instance's port on 127.0.0.1, the others the ports after it (0: free ones)")
	fs.StringVar(&c.Work, "work", "", "directory for the logs and the JetStream store (default: a temporary one, removed when the run passes)")
	fs.StringVar(&c.MD, "md", "", "write the results as a Markdown table to this file")
}

func (c *config) check() error {
	switch {
	case c.Instances < 2:
		return errors.New("-instances: at least 2, so that clients have another to go to")
	case c.Topics < 1 || c.Clients < c.Topics:
		return errors.New("want -topics >= 1 and at least one client per topic")
	case c.Rate <= 0 || c.Phase <= 0 || c.NATSDown < 0 || c.Drain <= 0:
		return errors.New("-rate, -phase and -drain must be positive, -nats-down not negative")
	case c.NATSSignal != "KILL" && c.NATSSignal != "TERM":
		return fmt.Errorf("-nats-signal %q: want KILL or TERM", c.NATSSignal)
	case c.Kill < 0 || c.Kill >= c.Instances:
		return fmt.Errorf("-kill %d: want 0 to %d", c.Kill, c.Instances-1)
	}
	return nil
}

// runner is one chaos run: its processes, clients and publisher.
type runner struct {
	cfg       config
	self      string // this binary, run as instance (and nats)
	nats      *natsProc
	instances []*proc
	addrs     []string
	clients   []*client
	pub       *publisher

	phase    atomic.Int32
	stopping atomic.Bool   // the clients no longer reconnect
	stop     chan struct{} // closed with stopping
	wg       sync.WaitGroup

	marks map[string]time.Time // when each step happened

	duplicatesLogged atomic.Int32
}

// logDuplicate logs the first 20 duplicates, to tell how they came.
func (r *runner) logDuplicate(what string) {
	if r.duplicatesLogged.Add(1) <= 20 {
		log.Printf("chaos: duplicate: %s", what)
	}
}

func runMain(args []string) int {
	fs := flag.NewFlagSet("chaos run", flag.ContinueOnError)
	var cfg config
	cfg.flags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := cfg.check(); err != nil {
		fmt.Fprintf(os.Stderr, "chaos run: %v\n", err)
		return 2
	}
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	res, err := run(ctx, cfg)
	if err != nil {
		log.Printf("chaos run: %v", err)
		return 1
	}
	if !res.Pass {
		return 1
	}
	return 0
}

// run makes a chaos run and returns its result; an error means the run
// could not be made (a process did not start, clients could not connect).
func run(ctx context.Context, cfg config) (res *result, err error) {
	r := &runner{cfg: cfg, stop: make(chan struct{}), marks: make(map[string]time.Time)}
	if r.self, err = os.Executable(); err != nil {
		return nil, err
	}
	keep := cfg.Work != ""
	if !keep {
		if cfg.Work, err = os.MkdirTemp("", "gust-chaos-"); err != nil {
			return nil, err
		}
		r.cfg.Work = cfg.Work
	}
	defer func() {
		if keep || err == nil && res.Pass {
			if !keep {
				os.RemoveAll(cfg.Work)
			}
			return
		}
		log.Printf("chaos: the logs and the store are kept in %s", cfg.Work)
	}()
	defer r.shutdown()

	if err := r.startNATS(ctx); err != nil {
		return nil, err
	}
	if r.pub, err = newPublisher(r.nats.url, cfg.Topics); err != nil {
		return nil, err
	}
	if err := r.startInstances(ctx); err != nil {
		return nil, err
	}
	if err := r.connectClients(ctx); err != nil {
		return nil, err
	}
	if err := r.schedule(ctx); err != nil {
		return nil, err
	}
	r.drain(ctx)
	r.stopClients()
	stats := r.stopInstances()
	res = r.result(stats)
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	if cfg.MD != "" {
		if err := os.WriteFile(cfg.MD, []byte(res.markdown()), 0o644); err != nil {
			return res, err
		}
	}
	log.Print(res.summary())
	return res, nil
}

// natsProc is the NATS server: a process stopped and started again on the
// same port and store.
type natsProc struct {
	bin, self string
	addr, url string
	dir, logs string
	p         *proc
}

func (r *runner) startNATS(ctx context.Context) error {
	port := r.cfg.NATSPort
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return err
		}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	r.nats = &natsProc{bin: r.cfg.NATSServer, self: r.self, addr: addr, url: "nats://" + addr,
		dir: filepath.Join(r.cfg.Work, "jetstream"), logs: filepath.Join(r.cfg.Work, "nats.log")}
	return r.nats.start(ctx)
}

// start starts the server and waits until JetStream answers.
func (n *natsProc) start(ctx context.Context) error {
	var err error
	if n.bin == "" {
		n.p, err = startProc("nats-server", n.logs, n.self, "nats", "-addr", n.addr, "-sd", n.dir)
	} else {
		host, port, _ := net.SplitHostPort(n.addr)
		n.p, err = startProc("nats-server", n.logs, n.bin, "-a", host, "-p", port, "-js", "-sd", n.dir)
	}
	if err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err := jetStreamReady(ctx, n.url); err == nil {
			return nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("nats-server's JetStream did not answer in 15 s (%v): see %s", err, n.logs)
		}
		select {
		case <-n.p.done:
			return fmt.Errorf("nats-server exited (%v): see %s", n.p.cmd.ProcessState, n.logs)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func jetStreamReady(ctx context.Context, url string) error {
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (r *runner) startInstances(ctx context.Context) error {
	for i := range r.cfg.Instances {
		addr := "127.0.0.1:0"
		if r.cfg.Port != 0 {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.cfg.Port+i))
		}
		p, err := startProc(fmt.Sprintf("instance %d", i), filepath.Join(r.cfg.Work, fmt.Sprintf("instance%d.log", i)),
			r.self, "instance", "-addr", addr, "-nats", r.nats.url, "-outbox", strconv.Itoa(r.cfg.Outbox))
		if err != nil {
			return err
		}
		r.instances = append(r.instances, p)
	}
	for _, p := range r.instances {
		addr, err := p.waitReady(ctx, 15*time.Second)
		if err != nil {
			return err
		}
		r.addrs = append(r.addrs, addr)
	}
	return nil
}

// connectClients connects every client, 64 at a time, and waits until each
// has its recovered notice.
func (r *runner) connectClients(ctx context.Context) error {
	for i := range r.cfg.Clients {
		// A topic's clients, in turn on each instance.
		t, j := i%r.cfg.Topics, i/r.cfg.Topics
		r.clients = append(r.clients, &client{r: r, id: i, topic: t, home: j % r.cfg.Instances})
	}
	log.Printf("chaos: connecting %d clients to %d instances (%d topics)", r.cfg.Clients, r.cfg.Instances, r.cfg.Topics)
	work := make(chan *client)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for cl := range work {
				if err := cl.dial(cl.home); err != nil {
					select {
					case errs <- fmt.Errorf("client %d: %w", cl.id, err):
					default:
					}
				}
			}
		})
	}
feed:
	for _, cl := range r.clients {
		select {
		case work <- cl:
		case err := <-errs:
			errs <- err
			break feed
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	return r.waitFor(ctx, 60*time.Second, "every client's recovered notice", func() bool {
		for _, cl := range r.clients {
			cl.mu.Lock()
			live := cl.live
			cl.mu.Unlock()
			if !live {
				return false
			}
		}
		return true
	})
}

// waitFor polls cond every 50 ms until it holds, d passes or ctx ends.
func (r *runner) waitFor(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %v for %s", d, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func (r *runner) mark(step string) {
	r.marks[step] = time.Now()
	log.Printf("chaos: %s", step)
}

// schedule publishes for three phases, killing an instance after the
// first (with Overlap, once nats-server has stopped) and restarting
// nats-server after the second.
func (r *runner) schedule(ctx context.Context) error {
	cfg := r.cfg
	start := time.Now().Add(100 * time.Millisecond)
	end := start.Add(3*cfg.Phase + cfg.NATSDown)
	published := make(chan struct{})
	go func() {
		defer close(published)
		r.pub.run(start, end, cfg.Rate, r.stop)
	}()
	sleep := func(until time.Time) error {
		select {
		case <-time.After(time.Until(until)):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.phase.Store(phaseBefore)
	r.marks["publishing"] = start
	log.Printf("chaos: publishing %.0f messages a second over %d topics", cfg.Rate, cfg.Topics)
	if err := sleep(start.Add(cfg.Phase)); err != nil {
		return err
	}
	r.phase.Store(phaseInstance)
	kill := func() {
		r.mark(fmt.Sprintf("kill -9 instance %d", cfg.Kill))
		r.instances[cfg.Kill].stop(syscall.SIGKILL, 5*time.Second)
	}
	if !cfg.Overlap {
		kill()
	}
	if err := sleep(start.Add(2 * cfg.Phase)); err != nil {
		return err
	}
	r.phase.Store(phaseNATS)
	sig := syscall.SIGKILL
	if cfg.NATSSignal == "TERM" {
		sig = syscall.SIGTERM
	}
	r.mark("nats-server stopped with SIG" + cfg.NATSSignal)
	if !r.nats.p.stop(sig, 10*time.Second) {
		log.Printf("chaos: nats-server did not stop in 10 s: killed")
	}
	r.mark("nats-server stopped")
	if cfg.Overlap {
		kill()
	}
	if err := sleep(r.marks["nats-server stopped"].Add(cfg.NATSDown)); err != nil {
		return err
	}
	r.mark("nats-server starting again")
	if err := r.nats.start(ctx); err != nil {
		return err
	}
	r.mark("nats-server ready again")
	select {
	case <-published:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.phase.Store(phaseDrain)
	r.mark("publishing over")
	return nil
}

// drain waits, at most cfg.Drain, until every client is live and has the
// last message confirmed on its topic.
func (r *runner) drain(ctx context.Context) {
	err := r.waitFor(ctx, r.cfg.Drain, "every client's last message", func() bool {
		for _, cl := range r.clients {
			cl.mu.Lock()
			done := cl.live && cl.tally.maxCounter >= r.pub.last[cl.topic]
			cl.mu.Unlock()
			if !done {
				return false
			}
		}
		return true
	})
	if err != nil {
		log.Printf("chaos: %v", err)
	}
	r.mark("drained")
}

// stopClients closes every client's connection and waits, at most 10 s,
// for their read loops and reconnections to end.
func (r *runner) stopClients() {
	if r.stopping.Swap(true) {
		return
	}
	close(r.stop)
	for _, cl := range r.clients {
		cl.close()
	}
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		log.Printf("chaos: clients still closing after 10 s: closing them now")
		for _, cl := range r.clients {
			cl.mu.Lock()
			if cl.conn != nil {
				cl.conn.CloseNow()
			}
			cl.mu.Unlock()
		}
		<-done
	}
}

// stopInstances stops the instances still up with SIGTERM and returns
// their counters; the killed one's are nil.
func (r *runner) stopInstances() []*instanceStats {
	stats := make([]*instanceStats, len(r.instances))
	for _, p := range r.instances {
		p.signal(syscall.SIGTERM)
	}
	for i, p := range r.instances {
		if i == r.cfg.Kill {
			continue
		}
		p.stop(syscall.SIGTERM, 10*time.Second)
		var st instanceStats
		if json.Unmarshal([]byte(p.lastLine()), &st) == nil {
			stats[i] = &st
		}
	}
	return stats
}

// shutdown ends whatever is left, on every path out of run.
func (r *runner) shutdown() {
	r.stopClients()
	if r.pub != nil {
		r.pub.close()
	}
	for _, p := range r.instances {
		p.stop(syscall.SIGKILL, 5*time.Second)
	}
	if r.nats != nil && r.nats.p != nil {
		r.nats.p.stop(syscall.SIGTERM, 10*time.Second)
	}
}
