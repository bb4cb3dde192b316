// Command bigmsg measures one large message (issue 14, item 1): the time
// and the peak RSS of each side when a sender process streams one N-byte
// message over loopback to a receiver process that writes it to a file.
// One binary, two modes, one process each:
//
//	bigmsg -mode receive -lib gust -addr 127.0.0.1:9600 [-compress]
//	bigmsg -mode send    -lib gust -addr 127.0.0.1:9600 -size 200MB [-compress]
//
// The libraries, each through its streaming API:
//
//   - gust: the sender writes with Conn.WriteFrom, the receiver (a
//     gust.Server, Options.StreamThreshold 64 KiB) reads the streamed
//     Message with io.Copy;
//   - gorilla: NextWriter and NextReader;
//   - coder: Writer and Reader.
//
// The receiver accepts one connection, copies the message into a file in a
// temporary directory (removed before it exits), answers with a text
// message "ok N" and prints one JSON line; the sender makes the bytes as it
// goes (a 128 KiB block of text-like bytes, rotated at each read, that
// deflate shrinks to about half), waits for the answer and prints its own
// line. Each reads its peak RSS (VmHWM in /proc/self/status) at the end.
// The sender's seconds run from the dial to the answer; the receiver's,
// from the accept to the file's last byte. scripts/bench-bigmsg runs the
// matrix and writes the table.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"time"
)

type config struct {
	lib      string
	addr     string
	size     int64
	compress bool
	dir      string
	timeout  time.Duration
}

// result is the JSON line each side prints.
type result struct {
	Role       string  `json:"role"`
	Lib        string  `json:"lib"`
	Compress   bool    `json:"compress"`
	Bytes      int64   `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	PeakRSSKiB int64   `json:"peak_rss_kib"`
}

func main() {
	mode := flag.String("mode", "", `"send" or "receive"`)
	var c config
	flag.StringVar(&c.lib, "lib", "gust", "gust, gorilla or coder")
	flag.StringVar(&c.addr, "addr", "127.0.0.1:9600", "the receiver's address (loopback)")
	size := flag.String("size", "200MB", "send: the message's size (bytes, or with KB, MB, GB, KiB, MiB, GiB)")
	flag.BoolVar(&c.compress, "compress", false, "offer (send) or accept (receive) permessage-deflate")
	flag.StringVar(&c.dir, "dir", "", "receive: where to make the temporary directory (default: os.TempDir)")
	flag.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up after this long")
	flag.Parse()

	n, err := parseSize(*size)
	if err != nil {
		fatalf("-size %q: %v", *size, err)
	}
	c.size = n
	time.AfterFunc(c.timeout, func() { fatalf("%s %s: no result after %v", *mode, c.lib, c.timeout) })

	var r result
	switch *mode {
	case "send":
		r, err = send(c)
	case "receive":
		r, err = receive(c)
	default:
		fatalf(`-mode must be "send" or "receive"`)
	}
	if err != nil {
		fatalf("%s %s: %v", *mode, c.lib, err)
	}
	r.Lib, r.Compress = c.lib, c.compress
	r.PeakRSSKiB, err = peakRSS()
	if err != nil {
		fatalf("peak RSS: %v", err)
	}
	json.NewEncoder(os.Stdout).Encode(r)
}

func send(c config) (result, error) {
	s, ok := senders[c.lib]
	if !ok {
		return result{}, fmt.Errorf("unknown -lib %q", c.lib)
	}
	start := time.Now()
	n, err := s(c, newTextSource(c.size))
	if err == nil && n != c.size {
		err = fmt.Errorf("sent %d bytes of %d", n, c.size)
	}
	return result{Role: "sender", Bytes: n, Seconds: time.Since(start).Seconds()}, err
}

func receive(c config) (result, error) {
	rcv, ok := receivers[c.lib]
	if !ok {
		return result{}, fmt.Errorf("unknown -lib %q", c.lib)
	}
	dir, err := os.MkdirTemp(c.dir, "bigmsg-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	f, err := os.Create(dir + "/message")
	if err != nil {
		return result{}, err
	}
	defer f.Close()
	var start time.Time
	n, err := rcv(c, f, func() { start = time.Now() })
	return result{Role: "receiver", Bytes: n, Seconds: time.Since(start).Seconds()}, err
}

// textSource yields n bytes of a 128 KiB block of lowercase words, rotated
// by 4099 bytes more at each read: cheap to make, rarely the same read
// twice, and about half its size once deflated.
type textSource struct {
	n, off int64
	block  []byte
}

func newTextSource(n int64) *textSource {
	const size = 128 << 10
	r := rand.New(rand.NewSource(1))
	b := make([]byte, 0, 2*size)
	for len(b) < size {
		w := 2 + r.Intn(8)
		for range w {
			b = append(b, byte('a'+r.Intn(16)))
		}
		b = append(b, ' ')
	}
	b = b[:size]
	return &textSource{n: n, block: append(b, b...)}
}

func (s *textSource) Read(p []byte) (int, error) {
	if s.n == 0 {
		return 0, io.EOF
	}
	const size = 128 << 10
	start := int(s.off % size)
	k := copy(p[:min(int64(len(p)), s.n, size)], s.block[start:])
	s.n -= int64(k)
	s.off += int64(k) + 4099
	return k, nil
}

// peakRSS reads the process's peak resident set size (VmHWM) in KiB.
func peakRSS() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}

func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = v, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("not a size")
	}
	return n * mult, nil
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bigmsg: "+format+"\n", args...)
	os.Exit(1)
}
