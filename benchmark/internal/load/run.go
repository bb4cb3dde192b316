package load

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

// Result is the outcome of a run that completed without an error. Latencies are in
// milliseconds; MB is 10^6 bytes of payload echoed (one direction).
type Result struct {
	Label       string  `json:"label,omitempty"`
	Target      string  `json:"target"`
	Mode        string  `json:"mode"` // echo, recv-only or idle
	Conns       int     `json:"conns"`
	Window      int     `json:"window"`
	Rate        float64 `json:"rate,omitempty"`
	Payload     int     `json:"payload_bytes"`
	Binary      bool    `json:"binary"`
	Verified    bool    `json:"verified"` // every echo was compared with what was sent
	RampSeconds float64 `json:"ramp_seconds"`
	Seconds     float64 `json:"seconds"`

	Messages  int64   `json:"messages"`        // completed within the measured phase
	Drained   int64   `json:"drained"`         // completed after it (the in-flight window)
	Early     int64   `json:"early,omitempty"` // -recv-only: received before the phase began
	MsgPerSec float64 `json:"msg_per_sec"`
	MBPerSec  float64 `json:"mb_per_sec"`

	LatMinMs  float64 `json:"lat_min_ms"`
	LatAvgMs  float64 `json:"lat_avg_ms"`
	LatP50Ms  float64 `json:"lat_p50_ms"`
	LatP90Ms  float64 `json:"lat_p90_ms"`
	LatP99Ms  float64 `json:"lat_p99_ms"`
	LatMaxMs  float64 `json:"lat_max_ms"`
	ClientCPU float64 `json:"client_cpu_percent"`

	ServerPID           int     `json:"server_pid,omitempty"`
	ServerCPUSeconds    float64 `json:"server_cpu_seconds,omitempty"`
	ServerCPUPercent    float64 `json:"server_cpu_percent,omitempty"`
	ServerCPUPerMillion float64 `json:"server_cpu_s_per_million,omitempty"`
	ServerRSSBeforeKB   int64   `json:"server_rss_before_kb,omitempty"`
	ServerRSSAfterKB    int64   `json:"server_rss_after_kb,omitempty"`

	// From the server's /debug/stats, when StatsURL was given.
	ServerAllocsPerMsg  float64 `json:"server_allocs_per_msg,omitempty"`
	ServerHeapBeforeKB  float64 `json:"server_heap_before_kb,omitempty"`
	ServerHeapAfterKB   float64 `json:"server_heap_after_kb,omitempty"`
	ServerGoroutines    int     `json:"server_goroutines,omitempty"`
	ServerGoroutinesPre int     `json:"server_goroutines_before,omitempty"`

	// Idle mode: growth per connection from before the ramp to the end of the hold. The heap
	// is HeapInuse after one GC (what /debug/stats?gc=1 reports); HeapSettledPerConnKB is the
	// same after a second GC, once sync.Pool's victim caches are dropped too (pooled buffers
	// and compressors that no connection holds), and HeapLivePerConnKB is HeapAlloc then (the
	// bytes of live objects, without the free space of partly used spans that HeapInuse
	// counts).
	RSSPerConnKB         float64 `json:"rss_per_conn_kb,omitempty"`
	HeapPerConnKB        float64 `json:"heap_per_conn_kb,omitempty"`
	HeapSettledPerConnKB float64 `json:"heap_settled_per_conn_kb,omitempty"`
	HeapLivePerConnKB    float64 `json:"heap_live_per_conn_kb,omitempty"` // HeapAlloc after the second GC: live bytes, no span slack
	GoroutinesPerConn    float64 `json:"goroutines_per_conn,omitempty"`

	// The server's peak memory while the connections were busy: in idle mode with a count, from
	// the first message sent to the last echo received (the burst); in -recv-only mode over the
	// measured phase. The heap is HeapInuse sampled every millisecond by the server (echoserver's
	// ?peak=), the RSS the kernel's high-water mark (VmHWM); per connection, the growth from
	// before the ramp. Zero when the server does not sample.
	ServerHeapPeakKB  float64 `json:"server_heap_peak_kb,omitempty"`
	ServerRSSPeakKB   int64   `json:"server_rss_peak_kb,omitempty"`
	PeakHeapPerConnKB float64 `json:"peak_heap_per_conn_kb,omitempty"`
	PeakRSSPerConnKB  float64 `json:"peak_rss_per_conn_kb,omitempty"`

	// With Seq: the range of the sequence numbers the connections saw.
	Seq *SeqRange `json:"seq,omitempty"`

	// With Deflate: the server's Sec-WebSocket-Extensions (first connection), and payload bytes
	// on the wire over payload bytes before compression, each way, over the whole run.
	Deflate         string  `json:"deflate,omitempty"`
	DeflateOutRatio float64 `json:"deflate_out_ratio,omitempty"`
	DeflateInRatio  float64 `json:"deflate_in_ratio,omitempty"`

	// With PingAtEnd: the pongs received (every connection's, or the run fails), the seconds
	// from the first ping written to the last pong read, and the server's RSS, heap (after one
	// GC) and goroutines half a second after the last pong.
	PingsAnswered             int64   `json:"pings_answered,omitempty"`
	PingSeconds               float64 `json:"ping_seconds,omitempty"`
	ServerRSSAfterPingKB      int64   `json:"server_rss_after_ping_kb,omitempty"`
	ServerHeapAfterPingKB     float64 `json:"server_heap_after_ping_kb,omitempty"`
	ServerGoroutinesAfterPing int     `json:"server_goroutines_after_ping,omitempty"`
}

// SeqRange sums up the sequence numbers of a -seq run: every connection received consecutive
// numbers, from its first to its last; the lowest and highest of those over the connections.
// A run whose connections all got the same messages has FirstMin == FirstMax and LastMin ==
// LastMax.
type SeqRange struct {
	FirstMin int64 `json:"first_min"`
	FirstMax int64 `json:"first_max"`
	LastMin  int64 `json:"last_min"`
	LastMax  int64 `json:"last_max"`
	// Empty counts the connections that received no message (left out of the four above).
	Empty int `json:"empty"`
}

type runner struct {
	cfg    Config
	target target
	msg    *message
	hist   Histogram

	rndMu sync.Mutex
	rnd   *rand.Rand

	base      time.Time // the clock origin for now()
	startTime time.Time // start of the measured phase

	stop     chan struct{} // closed when senders must stop (end of phase or failure)
	stopOnce sync.Once
	aborted  atomic.Bool
	errMu    sync.Mutex
	err      error
	failed   chan struct{}

	connsMu sync.Mutex
	conns   []*wsConn

	// -recv-only with a count: the connections that have received it, and a channel closed
	// when they all have.
	complete    atomic.Int64
	allReceived chan struct{}
}

// received is called once by each connection's reader when it has received Count messages.
func (r *runner) received() {
	if r.complete.Add(1) == int64(len(r.conns)) {
		close(r.allReceived)
	}
}

func (r *runner) now() int64 { return int64(time.Since(r.base)) }
func (r *runner) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}
func (r *runner) halt() { r.stopOnce.Do(func() { close(r.stop) }) }

// fail records the first error and stops the run.
func (r *runner) fail(err error) {
	r.errMu.Lock()
	first := r.err == nil
	if first {
		r.err = err
		r.aborted.Store(true)
		close(r.failed)
	}
	r.errMu.Unlock()
	if first {
		r.halt()
		r.connsMu.Lock()
		for _, c := range r.conns {
			c.nc.Close()
		}
		r.connsMu.Unlock()
	}
}

func (r *runner) error() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.err
}

// Run performs one load run. It returns an error, never a result, when a connection fails, an
// echo differs from what was sent, or an echo does not come back within cfg.Timeout.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	t, err := parseTarget(cfg.Target)
	if err != nil {
		return nil, err
	}
	srcs, err := cfg.sourceAddrs(t)
	if err != nil {
		return nil, err
	}
	seed := cfg.Seed
	if seed == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	r := &runner{
		cfg: cfg, target: t, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		base: time.Now(), stop: make(chan struct{}), failed: make(chan struct{}),
		allReceived: make(chan struct{}),
	}
	r.msg, err = newMessage(cfg.Message, cfg.Size, cfg.Binary, r.rnd)
	if err != nil {
		return nil, err
	}
	if !cfg.Binary && !utf8.Valid(r.msg.data) {
		return nil, errors.New("the message is not valid UTF-8; send it with -binary")
	}
	if err := raiseNoFile(uint64(cfg.Conns) + 256); err != nil {
		return nil, err
	}

	res := &Result{
		Label: cfg.Label, Target: "ws://" + t.host + t.path, Mode: "echo", Conns: cfg.Conns,
		Window: cfg.Window, Rate: cfg.Rate, Payload: len(r.msg.data), Binary: cfg.Binary,
		ServerPID: cfg.ServerPID,
	}
	switch {
	case cfg.RecvOnly:
		res.Mode = "recv-only"
	case cfg.Idle:
		res.Mode = "idle"
	default:
		res.Verified = true
	}

	var statsBefore *ServerStats
	if cfg.StatsURL != "" {
		gcs := 0
		if cfg.Idle {
			gcs = 2
		}
		if statsBefore, err = fetchStats(cfg.StatsURL, gcs); err != nil {
			return nil, err
		}
		res.ServerHeapBeforeKB = float64(statsBefore.HeapInuse) / 1024
		res.ServerGoroutinesPre = statsBefore.Goroutines
	}
	var rssBefore int64
	if cfg.ServerPID > 0 {
		if rssBefore, err = procRSS(cfg.ServerPID); err != nil {
			return nil, err
		}
		res.ServerRSSBeforeKB = rssBefore
	}

	defer r.closeAll()
	rampStart := time.Now()
	if err := r.ramp(ctx, srcs); err != nil {
		return nil, err
	}
	res.RampSeconds = time.Since(rampStart).Seconds()

	if cfg.Deflate && len(r.conns) > 0 {
		res.Deflate = r.conns[0].deflateAt
	}

	if cfg.Idle && cfg.Count == 0 {
		return r.holdIdle(ctx, res, statsBefore)
	}
	if cfg.Idle {
		return r.echoThenHold(ctx, res, statsBefore)
	}

	// The measured phase.
	start := make(chan struct{})
	var writers sync.WaitGroup
	for _, c := range r.conns {
		c.times = make([]atomic.Int64, cfg.Window)
		go c.readLoop()
		if !cfg.RecvOnly {
			writers.Add(1)
			go func() { defer writers.Done(); c.writeLoop(start) }()
		}
	}
	var statsStart *ServerStats
	if cfg.StatsURL != "" {
		if cfg.RecvOnly {
			statsStart, _ = fetchPeak(cfg.StatsURL, true)
		} else {
			statsStart, _ = fetchStats(cfg.StatsURL, 0)
		}
	}
	// The counters start after the stats request, which a busy server may answer late: in
	// -recv-only mode the readers already count, and the server already works, while it waits.
	cpu0, _ := procCPU(cfg.ServerPID)
	self0 := selfCPU()
	baseMsgs, baseBytes := r.totals()
	r.startTime = time.Now()
	close(start)

	var writersDone chan struct{} // nil: only the clock ends the phase
	switch {
	case cfg.RecvOnly && cfg.Count > 0:
		writersDone = r.allReceived
	case cfg.Count > 0:
		done := make(chan struct{})
		go func() { writers.Wait(); close(done) }()
		writersDone = done
	}
	var deadline <-chan time.Time
	if cfg.Duration > 0 {
		tm := time.NewTimer(cfg.Duration)
		defer tm.Stop()
		deadline = tm.C
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastMsgs, lastBytes := baseMsgs, baseBytes
	lastTick := time.Now()
	secs := 0
phase:
	for {
		select {
		case <-ctx.Done():
			r.fail(ctx.Err())
		case <-r.failed:
			break phase
		case <-deadline:
			break phase
		case <-writersDone:
			// Every connection sent its count; the drain below waits for the last echoes.
			break phase
		case now := <-tick.C:
			secs++
			msgs, bytes := r.totals()
			if cfg.Progress != nil {
				dt := now.Sub(lastTick).Seconds()
				fmt.Fprintf(cfg.Progress, "gustload: %3ds  conns %d  %.0f msg/s  %.1f MB/s\n", secs, len(r.conns),
					float64(msgs-lastMsgs)/dt, float64(bytes-lastBytes)/dt/1e6)
			}
			lastMsgs, lastBytes, lastTick = msgs, bytes, now
			r.checkStalls(cfg.Timeout)
		}
	}
	r.halt()
	elapsed := time.Since(r.startTime)
	msgs, bytes := r.totals()
	cpu1, _ := procCPU(cfg.ServerPID)
	self1 := selfCPU()
	msgs, bytes = msgs-baseMsgs, bytes-baseBytes
	var statsEnd *ServerStats
	if cfg.StatsURL != "" && r.error() == nil {
		if cfg.RecvOnly {
			statsEnd, _ = fetchPeak(cfg.StatsURL, false)
		} else {
			statsEnd, _ = fetchStats(cfg.StatsURL, 0)
		}
	}
	if err := r.error(); err != nil {
		return nil, err
	}

	// -recv-only with a count: every connection must have received it in time.
	if cfg.RecvOnly && cfg.Count > 0 && r.complete.Load() < int64(len(r.conns)) {
		return nil, r.shortError(cfg.Count, elapsed)
	}
	// Drain: every message sent must come back.
	if !cfg.RecvOnly && !r.waitEchoes(cfg.Timeout) {
		if err := r.error(); err != nil {
			return nil, err
		}
		return nil, r.missingError(cfg.Timeout)
	}
	total, _ := r.totals()
	total -= baseMsgs
	r.closeAll()
	if err := r.error(); err != nil {
		return nil, err
	}

	res.Seconds = elapsed.Seconds()
	res.Messages, res.Drained, res.Early = msgs, total-msgs, baseMsgs
	res.MsgPerSec = float64(msgs) / res.Seconds
	res.MBPerSec = float64(bytes) / res.Seconds / 1e6
	if h := &r.hist; h.Count() > 0 {
		ms := func(ns uint64) float64 { return float64(ns) / 1e6 }
		res.LatMinMs, res.LatAvgMs, res.LatMaxMs = ms(h.Min()), h.Mean()/1e6, ms(h.Max())
		res.LatP50Ms, res.LatP90Ms, res.LatP99Ms = ms(h.Quantile(.5)), ms(h.Quantile(.9)), ms(h.Quantile(.99))
	}
	res.ClientCPU = (self1 - self0) / res.Seconds * 100
	if cfg.ServerPID > 0 {
		res.ServerCPUSeconds = cpu1 - cpu0
		res.ServerCPUPercent = res.ServerCPUSeconds / res.Seconds * 100
		if msgs > 0 {
			res.ServerCPUPerMillion = res.ServerCPUSeconds / float64(msgs) * 1e6
		}
		res.ServerRSSAfterKB, _ = procRSS(cfg.ServerPID)
	}
	r.deflateRatios(res)
	if cfg.Seq {
		res.Seq = r.seqRange()
	}
	if statsStart != nil && statsEnd != nil {
		if msgs > 0 {
			res.ServerAllocsPerMsg = float64(statsEnd.Mallocs-statsStart.Mallocs) / float64(msgs)
		}
		res.ServerHeapAfterKB = float64(statsEnd.HeapInuse) / 1024
		res.ServerGoroutines = statsEnd.Goroutines
	}
	r.peaks(res, statsBefore, statsEnd)
	return res, nil
}

// peaks fills in the server's peak memory from the stats that ended its sampling.
func (r *runner) peaks(res *Result, before, end *ServerStats) {
	if before == nil || end == nil || end.HeapInusePeak == 0 || len(r.conns) == 0 {
		return
	}
	n := float64(len(r.conns))
	res.ServerHeapPeakKB = float64(end.HeapInusePeak) / 1024
	res.PeakHeapPerConnKB = (float64(end.HeapInusePeak) - float64(before.HeapInuse)) / 1024 / n
	if end.RSSPeakKB > 0 && res.ServerRSSBeforeKB > 0 {
		res.ServerRSSPeakKB = end.RSSPeakKB
		res.PeakRSSPerConnKB = float64(end.RSSPeakKB-res.ServerRSSBeforeKB) / n
	}
}

// ramp opens cfg.Conns connections, DialConcurrency at a time.
func (r *runner) ramp(ctx context.Context, srcs []net.IP) error {
	cfg := r.cfg
	r.conns = make([]*wsConn, 0, cfg.Conns)
	ids := make(chan int)
	var wg sync.WaitGroup
	var progressed atomic.Int64
	for w := 0; w < min(cfg.DialConcurrency, cfg.Conns); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				var src net.IP
				if srcs != nil {
					src = srcs[id%len(srcs)]
				}
				c, err := r.dial(ctx, id, src)
				if err != nil {
					r.fail(fmt.Errorf("connection %d: %w", id, err))
					continue
				}
				r.connsMu.Lock()
				if r.aborted.Load() {
					c.nc.Close()
				} else {
					r.conns = append(r.conns, c)
				}
				r.connsMu.Unlock()
				progressed.Add(1)
			}
		}()
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var limiter <-chan time.Time
	if cfg.ConnectRate > 0 {
		lt := time.NewTicker(time.Duration(float64(time.Second) / cfg.ConnectRate))
		defer lt.Stop()
		limiter = lt.C
	}
	began := time.Now()
feed:
	for id := 0; id < cfg.Conns; id++ {
		if limiter != nil {
			select {
			case <-limiter:
			case <-r.failed:
				break feed
			}
		}
		for sent := false; !sent; {
			select {
			case ids <- id:
				sent = true
			case <-r.failed:
				break feed
			case <-ctx.Done():
				r.fail(ctx.Err())
				break feed
			case <-tick.C:
				if cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "gustload: ramping %d/%d connections (%.0fs)\n", progressed.Load(), cfg.Conns,
						time.Since(began).Seconds())
				}
			}
		}
	}
	close(ids)
	wg.Wait()
	if err := r.error(); err != nil {
		return err
	}
	// Connections were appended in completion order; keep ids stable for messages.
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "gustload: ramped up to %d connections in %.2fs\n", len(r.conns), time.Since(began).Seconds())
	}
	return nil
}

// holdIdle keeps the connections open for the duration (or until EndHold), reports the
// server's memory growth per connection, and checks they are all still open: with PingAtEnd by
// a ping on each, otherwise by a read that must time out.
func (r *runner) holdIdle(ctx context.Context, res *Result, before *ServerStats) (*Result, error) {
	cfg := r.cfg
	hold := time.NewTimer(cfg.Duration)
	defer hold.Stop()
	began := time.Now()
	select {
	case <-hold.C:
	case <-cfg.EndHold:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res.Seconds = time.Since(began).Seconds()
	if err := r.measureIdle(res, before); err != nil {
		return nil, err
	}
	if cfg.PingAtEnd { // the pings tell which connections are still open
		if err := r.pingAtEnd(res, false); err != nil {
			return nil, err
		}
		return res, nil
	}
	// Are they all still open? A read that times out means yes; EOF means the server hung up.
	var closed atomic.Int64
	var wg sync.WaitGroup
	work := make(chan *wsConn)
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var b [1]byte
			for c := range work {
				_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
				if _, err := c.nc.Read(b[:]); err != nil && !errors.Is(err, syscall.EAGAIN) && !isTimeout(err) {
					closed.Add(1)
				}
			}
		}()
	}
	for _, c := range r.conns {
		work <- c
	}
	close(work)
	wg.Wait()
	if k := closed.Load(); k > 0 {
		return nil, fmt.Errorf("%d of %d idle connections were closed by the server during the hold", k, len(r.conns))
	}
	return res, nil
}

// echoThenHold is the idle mode with a count: every connection sends cfg.Count messages and
// gets their echoes (verified), then the connections are held for the duration, their readers
// still running so that a server that hangs up fails the run, and the server's memory growth
// per connection is reported.
func (r *runner) echoThenHold(ctx context.Context, res *Result, before *ServerStats) (*Result, error) {
	cfg := r.cfg
	start := make(chan struct{})
	var writers sync.WaitGroup
	for _, c := range r.conns {
		c.times = make([]atomic.Int64, cfg.Window)
		go c.readLoop()
		writers.Add(1)
		go func() { defer writers.Done(); c.writeLoop(start) }()
	}
	if cfg.StatsURL != "" {
		if _, err := fetchPeak(cfg.StatsURL, true); err != nil {
			return nil, err
		}
	}
	r.startTime = time.Now()
	close(start)
	done := make(chan struct{})
	go func() { writers.Wait(); close(done) }()
	select {
	case <-done:
	case <-r.failed:
		return nil, r.error()
	case <-ctx.Done():
		r.fail(ctx.Err())
		return nil, r.error()
	}
	if !r.waitEchoes(cfg.Timeout) {
		if err := r.error(); err != nil {
			return nil, err
		}
		return nil, r.missingError(cfg.Timeout)
	}
	if cfg.StatsURL != "" {
		end, err := fetchPeak(cfg.StatsURL, false)
		if err != nil {
			return nil, err
		}
		r.peaks(res, before, end)
	}
	res.Messages, _ = r.totals()
	res.Verified = true
	r.deflateRatios(res)
	hold := time.NewTimer(cfg.Duration)
	defer hold.Stop()
	began := time.Now()
	select {
	case <-hold.C:
	case <-cfg.EndHold:
	case <-r.failed:
		return nil, fmt.Errorf("during the hold: %w", r.error())
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res.Seconds = time.Since(began).Seconds()
	if err := r.measureIdle(res, before); err != nil {
		return nil, err
	}
	if err := r.error(); err != nil {
		return nil, fmt.Errorf("during the hold: %w", err)
	}
	if cfg.PingAtEnd {
		if err := r.pingAtEnd(res, true); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// measureIdle fills in the server's memory growth per connection.
func (r *runner) measureIdle(res *Result, before *ServerStats) error {
	cfg := r.cfg
	n := float64(len(r.conns))
	if cfg.ServerPID > 0 {
		rss, err := procRSS(cfg.ServerPID)
		if err != nil {
			return err
		}
		res.ServerRSSAfterKB = rss
		res.RSSPerConnKB = float64(rss-res.ServerRSSBeforeKB) / n
	}
	if cfg.StatsURL != "" {
		after, err := fetchStats(cfg.StatsURL, 1)
		if err != nil {
			return err
		}
		settled, err := fetchStats(cfg.StatsURL, 1) // a second GC: sync.Pool victims go too
		if err != nil {
			return err
		}
		res.ServerHeapAfterKB = float64(after.HeapInuse) / 1024
		res.ServerGoroutines = after.Goroutines
		res.HeapPerConnKB = (float64(after.HeapInuse) - float64(before.HeapInuse)) / 1024 / n
		res.HeapSettledPerConnKB = (float64(settled.HeapInuse) - float64(before.HeapInuse)) / 1024 / n
		res.HeapLivePerConnKB = (float64(settled.HeapAlloc) - float64(before.HeapAlloc)) / 1024 / n
		res.GoroutinesPerConn = float64(after.Goroutines-before.Goroutines) / n
	}
	return nil
}

// deflateRatios fills in the compression ratios with Deflate.
func (r *runner) deflateRatios(res *Result) {
	if !r.cfg.Deflate {
		return
	}
	var txWire, txPlain, rxWire, rxPlain int64
	for _, c := range r.conns {
		txWire += c.txWire.Load()
		txPlain += c.txPlain.Load()
		rxWire += c.rxWire.Load()
		rxPlain += c.rxBytes.Load()
	}
	if txPlain > 0 {
		res.DeflateOutRatio = float64(txWire) / float64(txPlain)
	}
	if rxPlain > 0 {
		res.DeflateInRatio = float64(rxWire) / float64(rxPlain)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (r *runner) totals() (msgs, bytes int64) {
	for _, c := range r.conns {
		msgs += c.acked.Load()
		bytes += c.rxBytes.Load()
	}
	return
}

// waitEchoes waits until every connection has its echoes back, a failure, or the timeout.
func (r *runner) waitEchoes(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if r.error() != nil {
			return false
		}
		all := true
		for _, c := range r.conns {
			if c.acked.Load() < c.sent.Load() {
				all = false
				break
			}
		}
		if all {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// shortError describes the connections that did not receive count messages within the phase.
func (r *runner) shortError(count int64, elapsed time.Duration) error {
	var conns, missing int64
	first, firstGot := -1, int64(0)
	for _, c := range r.conns {
		if got := c.acked.Load(); got < count {
			conns++
			missing += count - got
			if first < 0 {
				first, firstGot = c.id, got
			}
		}
	}
	return fmt.Errorf("%d of %d connections received fewer than %d messages within %.1fs, %d messages missing in all (first: connection %d, %d messages)",
		conns, len(r.conns), count, elapsed.Seconds(), missing, first, firstGot)
}

// seqRange sums up the sequence numbers the connections saw (Config.Seq).
func (r *runner) seqRange() *SeqRange {
	var s SeqRange
	seen := false
	for _, c := range r.conns {
		f, l := c.seqFirst.Load(), c.seqLast.Load()
		if f < 0 {
			s.Empty++
			continue
		}
		if !seen {
			s = SeqRange{FirstMin: f, FirstMax: f, LastMin: l, LastMax: l, Empty: s.Empty}
			seen = true
			continue
		}
		s.FirstMin, s.FirstMax = min(s.FirstMin, f), max(s.FirstMax, f)
		s.LastMin, s.LastMax = min(s.LastMin, l), max(s.LastMax, l)
	}
	return &s
}

func (r *runner) missingError(timeout time.Duration) error {
	var conns, missing int64
	first := -1
	for _, c := range r.conns {
		if d := c.sent.Load() - c.acked.Load(); d > 0 {
			conns++
			missing += d
			if first < 0 {
				first = c.id
			}
		}
	}
	return fmt.Errorf("%d messages on %d connections were not echoed within %v (first: connection %d)",
		missing, conns, timeout, first)
}

// checkStalls fails the run when the oldest message in flight on some connection has waited
// longer than the timeout.
func (r *runner) checkStalls(timeout time.Duration) {
	now := r.now()
	for _, c := range r.conns {
		a := c.acked.Load()
		if c.sent.Load() <= a {
			continue
		}
		if age := time.Duration(now - c.times[a%int64(r.cfg.Window)].Load()); age > timeout {
			r.fail(fmt.Errorf("connection %d: message %d not echoed within %v", c.id, a, timeout))
			return
		}
	}
}

// closeAll sends close frames, waits briefly for the readers, and closes the sockets.
func (r *runner) closeAll() {
	r.halt()
	r.connsMu.Lock()
	conns := r.conns
	r.connsMu.Unlock()
	for _, c := range conns {
		if !c.closing.Load() && !r.aborted.Load() {
			c.sendClose()
		}
	}
	for _, c := range conns {
		if c.times != nil { // a reader runs
			select {
			case <-c.done:
			case <-time.After(2 * time.Second):
			}
		}
		c.closing.Store(true)
		c.nc.Close()
	}
}
