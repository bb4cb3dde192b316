package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// config is what chaos run's flags set.
type config struct {
	Instances      int           `json:"instances"`
	Clients        int           `json:"clients"`
	Topics         int           `json:"topics"`
	Rate           float64       `json:"rate"`
	Senders        int           `json:"senders"`
	Phases         string        `json:"phases"`
	Phase          time.Duration `json:"-"`
	NATSDown       time.Duration `json:"-"`
	NATSSignal     string        `json:"nats_signal"`
	Drain          time.Duration `json:"-"`
	Kill           int           `json:"killed_instance"`
	Overlap        bool          `json:"overlap"`
	Freeze         time.Duration `json:"-"`
	FreezeInstance int           `json:"freeze_instance"`
	Forged         int           `json:"forged_per_kind"`
	Keep           int64         `json:"keep"`
	ClientPing     time.Duration `json:"-"`
	Beat           time.Duration `json:"-"`
	Grace          time.Duration `json:"-"`
	Outbox         int           `json:"outbox"`
	NATSServer     string        `json:"-"`
	NATSPort       int           `json:"-"`
	Port           int           `json:"-"`
	Work           string        `json:"-"`
	MD             string        `json:"-"`
}

// phaseOrder is every phase a run may take after the first publishing
// one, in the order they run.
var phaseOrder = []string{"kill", "nats", "burst", "empty", "empty-restart", "freeze", "forged"}

func (c *config) flags(fs *flag.FlagSet) {
	fs.IntVar(&c.Instances, "instances", 3, "gust server processes")
	fs.IntVar(&c.Clients, "clients", 3000, "WebSocket clients, spread evenly over the topics, a topic's over the instances")
	fs.IntVar(&c.Topics, "topics", 100, "topics")
	fs.Float64Var(&c.Rate, "rate", 1000, "messages published a second, over all topics: by the senders, or by the driver's publisher with -senders 0")
	fs.IntVar(&c.Senders, "senders", -1, "clients that also send to their topic, through their instance, -rate/senders messages a second each: the first ones, a topic's on different instances (-1: 3 a topic, at most -clients; 0: none, the driver's publisher publishes instead)")
	fs.StringVar(&c.Phases, "phases", strings.Join(phaseOrder, ","), "the phases to run after the first, in this order whatever the list's: "+strings.Join(phaseOrder, ", "))
	fs.DurationVar(&c.Phase, "phase", 10*time.Second, "publishing before the first phase and after each one's event")
	fs.DurationVar(&c.NATSDown, "nats-down", 2*time.Second, "how long nats-server stays stopped")
	fs.StringVar(&c.NATSSignal, "nats-signal", "KILL", "how nats-server is stopped: KILL or TERM")
	fs.DurationVar(&c.Drain, "drain", 30*time.Second, "how long to wait, after the last publish, for every client to have its topic's last message")
	fs.IntVar(&c.Kill, "kill", 0, "the instance killed with SIGKILL in phase kill, from 0")
	fs.BoolVar(&c.Overlap, "overlap", false, "kill the instance while nats-server is down in phase nats, instead of in phase kill: its clients recover on instances that are away from NATS")
	fs.DurationVar(&c.Freeze, "freeze", 10*time.Second, "how long phase freeze keeps the instance stopped (SIGSTOP)")
	fs.IntVar(&c.FreezeInstance, "freeze-instance", -1, "the instance frozen in phase freeze (-1: the one holding the most clients then)")
	fs.IntVar(&c.Forged, "forged", 20, "members joining in phase forged, of each kind of forged since")
	fs.Int64Var(&c.Keep, "keep", 1000, "messages the history keeps per topic")
	fs.DurationVar(&c.ClientPing, "client-ping", 2*time.Second, "the clients' heartbeat: a ping after this long without a frame, cut after as long again (0: none)")
	fs.DurationVar(&c.Beat, "beat", 100*time.Millisecond, "each instance publishes to a topic of its own this often, to tell what a frozen instance publishes late (0: never)")
	fs.DurationVar(&c.Grace, "grace", 3*time.Second, "how long after the store comes back a publish may still fail, and how long before it is lost a message may be stored and not reach a client")
	fs.IntVar(&c.Outbox, "outbox", 1024, "the instances' outbox size per connection, with OutboxCloseSlow")
	fs.StringVar(&c.NATSServer, "nats-server", "", "nats-server binary (default: this binary's embedded server, chaos nats)")
	fs.IntVar(&c.NATSPort, "nats-port", 0, "nats-server's port on 127.0.0.1 (0: a free one below the ephemeral range)")
	fs.IntVar(&c.Port, "port", 0, "the first instance's port on 127.0.0.1, the others the ports after it (0: free ones below the ephemeral range)")
	fs.StringVar(&c.Work, "work", "", "directory for the logs and the JetStream store (default: a temporary one, removed when the run passes)")
	fs.StringVar(&c.MD, "md", "", "write the results as Markdown tables to this file")
}

// selected returns the phases to run after the first, in phaseOrder.
func (c *config) selected() ([]string, error) {
	want := make(map[string]bool)
	for _, name := range strings.Split(c.Phases, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !slices.Contains(phaseOrder, name) {
			return nil, fmt.Errorf("-phases: unknown phase %q: want some of %s", name, strings.Join(phaseOrder, ", "))
		}
		want[name] = true
	}
	var out []string
	for _, name := range phaseOrder {
		if want[name] {
			out = append(out, name)
		}
	}
	return out, nil
}

func (c *config) check() error {
	phases, err := c.selected()
	switch {
	case err != nil:
		return err
	case c.Instances < 2:
		return errors.New("-instances: at least 2, so that clients have another to go to")
	case c.Topics < 1 || c.Clients < c.Topics:
		return errors.New("want -topics >= 1 and at least one client per topic")
	case c.Senders < -1 || c.Senders > c.Clients:
		return fmt.Errorf("-senders %d: want -1 to -clients (%d)", c.Senders, c.Clients)
	case c.Rate <= 0 || c.Phase <= 0 || c.NATSDown < 0 || c.Drain <= 0 || c.Freeze <= 0:
		return errors.New("-rate, -phase, -freeze and -drain must be positive, -nats-down not negative")
	case c.Keep < 1 || c.Forged < 0 || c.ClientPing < 0 || c.Beat < 0 || c.Grace < 0:
		return errors.New("-keep must be positive; -forged, -client-ping, -beat and -grace not negative")
	case c.NATSSignal != "KILL" && c.NATSSignal != "TERM":
		return fmt.Errorf("-nats-signal %q: want KILL or TERM", c.NATSSignal)
	case c.Kill < 0 || c.Kill >= c.Instances:
		return fmt.Errorf("-kill %d: want 0 to %d", c.Kill, c.Instances-1)
	case c.FreezeInstance >= c.Instances:
		return fmt.Errorf("-freeze-instance %d: want -1 to %d", c.FreezeInstance, c.Instances-1)
	case slices.Contains(phases, "freeze") && c.FreezeInstance == c.Kill && slices.Contains(phases, "kill") && !slices.Contains(phases, "empty-restart"):
		return errors.New("-freeze-instance is the killed instance, which nothing starts again before phase freeze")
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
	clients   []*client // regular ones first, then watchers, then forged ones as they join
	senders   []*client // the first cfg.Senders regular clients
	pub       *publisher
	ledger    *ledger

	phases   []*phaseInfo  // connect, publishing, those selected, drain
	phase    atomic.Int32  // index in phases
	stopping atomic.Bool   // the clients no longer reconnect
	stop     chan struct{} // closed with stopping
	wg       sync.WaitGroup

	frozen  int                  // the instance phase freeze stops
	epochs  []string             // the history's epochs, in order
	lostAt  map[string]time.Time // epochs whose store was lost, and when
	outages []outage
	events  []event // what the driver did, when

	odd atomic.Int32 // odd things logged
}

// phaseInfo is a phase of the run: what happened in it, from when.
type phaseInfo struct {
	name       string
	start, end time.Time
	epoch      string // the history's epoch at its end
	lost       string // the epoch whose store it lost, if it did
	anew       string // the epoch the history started over in, if it did
}

// outage is nats-server stopped, from the stop signal until JetStream
// answers again.
type outage struct {
	phase       int
	stop, ready time.Time
}

type event struct {
	at   time.Time
	what string
}

// logOdd logs the first 40 odd things clients see (duplicates, messages
// out of order, gaps, epochs without a reset), to tell how they came.
func (r *runner) logOdd(what string) {
	if r.odd.Add(1) <= 40 {
		log.Printf("chaos: %s", what)
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
	selected, err := cfg.selected()
	if err != nil {
		return nil, err
	}
	if cfg.Senders < 0 {
		cfg.Senders = min(3*cfg.Topics, cfg.Clients)
	}
	r := &runner{cfg: cfg, stop: make(chan struct{}), lostAt: make(map[string]time.Time), frozen: cfg.FreezeInstance,
		ledger: newLedger(cfg.Topics)}
	for _, name := range append(append([]string{"connect", "publishing"}, selected...), "drain") {
		r.phases = append(r.phases, &phaseInfo{name: name})
	}
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

	r.phases[0].start = time.Now()
	if err := r.startNATS(ctx); err != nil {
		return nil, err
	}
	if r.pub, err = newPublisher(r.nats.url, cfg.Topics, cfg.Keep, filepath.Join(cfg.Work, "publisher.log"), r.ledger, func() int { return int(r.phase.Load()) }); err != nil {
		return nil, err
	}
	r.epochs = append(r.epochs, r.pub.broker.Epoch())
	if err := r.startInstances(ctx); err != nil {
		return nil, err
	}
	if err := r.connectClients(ctx); err != nil {
		return nil, err
	}
	if err := r.schedule(ctx, selected); err != nil {
		return nil, err
	}
	unreported := r.drain(ctx)
	r.stopClients()
	stats := r.stopInstances()
	res = r.result(stats, unreported)
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
// same port, on its store or on an empty one.
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

// freePort returns a port of 127.0.0.1 that nothing listens on, below the
// ephemeral range: a process started again on it after a kill finds it
// free, where a port of the range may meanwhile be a client socket's.
func freePort() (int, error) {
	low := ephemeralLow()
	if low > 12000 {
		for range 200 {
			port := 10000 + rand.N(low-10000)
			if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				ln.Close()
				return port, nil
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port the kernel gives to client sockets.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

// startInstances starts every instance on its own port and waits until
// each listens.
func (r *runner) startInstances(ctx context.Context) error {
	r.instances = make([]*proc, r.cfg.Instances)
	for i := range r.cfg.Instances {
		port := r.cfg.Port + i
		if r.cfg.Port == 0 {
			var err error
			if port, err = freePort(); err != nil {
				return err
			}
		}
		r.addrs = append(r.addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	return r.startAll(ctx)
}

// startAll starts the instances that are not running, on their addresses,
// and waits until each listens.
func (r *runner) startAll(ctx context.Context) error {
	var started []int
	for i, p := range r.instances {
		if p != nil && !p.exited() {
			continue
		}
		p, err := startProc(fmt.Sprintf("instance %d", i), filepath.Join(r.cfg.Work, fmt.Sprintf("instance%d.log", i)),
			r.self, "instance", "-addr", r.addrs[i], "-nats", r.nats.url, "-outbox", strconv.Itoa(r.cfg.Outbox),
			"-keep", strconv.FormatInt(r.cfg.Keep, 10), "-beat", r.cfg.Beat.String(), "-beat-topic", beatTopic(i))
		if err != nil {
			return err
		}
		r.instances[i] = p
		started = append(started, i)
	}
	for _, i := range started {
		if _, err := r.instances[i].waitReady(ctx, 15*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// connectClients connects every client, 64 at a time, and waits until each
// has its recovered notice: the regular clients with nothing kept, and a
// watcher of each instance's beat topic on the next instance.
func (r *runner) connectClients(ctx context.Context) error {
	for i := range r.cfg.Clients {
		// A topic's clients, in turn on each instance.
		t, j := i%r.cfg.Topics, i/r.cfg.Topics
		cl := newClient(r, i, regular, t, topicName(t), j%r.cfg.Instances)
		if i < r.cfg.Senders {
			cl.snd = newSender(i, t)
			r.senders = append(r.senders, cl)
		}
		r.clients = append(r.clients, cl)
	}
	if r.cfg.Beat > 0 {
		for i := range r.cfg.Instances {
			r.clients = append(r.clients, newClient(r, len(r.clients), watcher, i, beatTopic(i), (i+1)%r.cfg.Instances))
		}
	}
	log.Printf("chaos: connecting %d clients to %d instances (%d topics)", r.cfg.Clients, r.cfg.Instances, r.cfg.Topics)
	if err := r.dialAll(ctx, r.clients); err != nil {
		return err
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

// dialAll connects each client to its home, 64 at a time, and returns the
// first error.
func (r *runner) dialAll(ctx context.Context, clients []*client) error {
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
	for _, cl := range clients {
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
		return ctx.Err()
	}
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

// mark records and logs what the driver does.
func (r *runner) mark(format string, args ...any) time.Time {
	now := time.Now()
	what := fmt.Sprintf(format, args...)
	r.events = append(r.events, event{now, what})
	log.Printf("chaos: %s", what)
	return now
}

// drain waits for the broker's report on every message the publisher
// published, or the acknowledgement of every message the senders sent (at
// most the broker's PublishTimeout and a little), then, at most cfg.Drain,
// until every client is live and has the last message stored in its topic
// in the history's epoch. It returns the messages not reported or
// acknowledged.
func (r *runner) drain(ctx context.Context) (unreported int) {
	unreported = r.ledger.waitReported(15 * time.Second)
	epoch := r.pub.broker.Epoch()
	_, seqs := r.ledger.lastStored(epoch)
	err := r.waitFor(ctx, r.cfg.Drain, "every client's last message", func() bool {
		for _, cl := range r.clients {
			seq := uint64(0)
			if cl.kind != watcher {
				seq = seqs[cl.topic]
			}
			if !cl.caughtUp(epoch, seq) {
				return false
			}
		}
		return true
	})
	if err != nil {
		log.Printf("chaos: %v", err)
	}
	last := r.phases[len(r.phases)-1]
	last.end, last.epoch = r.mark("drained"), epoch
	return unreported
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
// their counters; those of an instance killed and not started again are
// nil.
func (r *runner) stopInstances() []*instanceStats {
	stats := make([]*instanceStats, len(r.instances))
	for _, p := range r.instances {
		if p != nil {
			p.signal(syscall.SIGCONT)
			p.signal(syscall.SIGTERM)
		}
	}
	for i, p := range r.instances {
		if p == nil || p.killed {
			continue
		}
		p.stop(syscall.SIGTERM, 10*time.Second)
		var st instanceStats
		if json.Unmarshal([]byte(p.lastLine("{")), &st) == nil {
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
		if p != nil {
			p.stop(syscall.SIGKILL, 5*time.Second)
		}
	}
	if r.nats != nil && r.nats.p != nil {
		r.nats.p.stop(syscall.SIGTERM, 10*time.Second)
	}
}
