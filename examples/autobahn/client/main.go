// Command client is the gust client the Autobahn TestSuite's fuzzing server
// tests: it asks the server how many cases it has, runs each one (echoing
// every message back, with permessage-deflate offered), and then asks the
// server to write its reports.
//
//	wstest -m fuzzingserver -s spec.json    # spec: {"url": "ws://127.0.0.1:9001", ...}
//	go run ./examples/autobahn/client -url ws://127.0.0.1:9001 -agent gust
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gustws/gust"
)

// echo sends every message back and reports the end of the connection.
type echo struct {
	gust.BuiltinEventHandler // answers pings
	done                     chan error
}

func (echo) OnMessage(c *gust.Conn, m *gust.Message) {
	c.WriteMessage(m.Opcode, m.Data) // a failed write ends the connection and reaches OnClose
	m.Close()
}

func (e echo) OnClose(_ *gust.Conn, err error) { e.done <- err }

// recorder keeps the text of the last message.
type recorder struct {
	gust.BuiltinEventHandler
	text string
	done chan error
}

func (r *recorder) OnMessage(_ *gust.Conn, m *gust.Message) {
	r.text = string(m.Data)
	m.Close()
}

func (r *recorder) OnClose(_ *gust.Conn, err error) { r.done <- err }

func main() {
	base := flag.String("url", "ws://127.0.0.1:9001", "URL of the fuzzing server")
	agent := flag.String("agent", "gust", "agent name the reports use")
	compress := flag.Bool("compress", true, "offer permessage-deflate")
	caseTimeout := flag.Duration("case-timeout", 2*time.Minute, "time one case may take before it is cut")
	flag.Parse()
	log.SetFlags(0)

	opts := &gust.DialOptions{Options: gust.Options{Compression: gust.CompressionOptions{Enabled: *compress}}}
	text, err := fetch(*base+"/getCaseCount", opts)
	if err != nil {
		log.Fatalf("getCaseCount: %v", err)
	}
	count, err := strconv.Atoi(strings.TrimSpace(text))
	if err != nil {
		log.Fatalf("getCaseCount answered %q: %v", text, err)
	}
	log.Printf("%d cases at %s, agent %q", count, *base, *agent)

	start := time.Now()
	failed := 0
	for i := 1; i <= count; i++ {
		u := fmt.Sprintf("%s/runCase?case=%d&agent=%s", *base, i, url.QueryEscape(*agent))
		if err := runCase(u, opts, *caseTimeout); err != nil {
			// The server judges the case; a dial error is worth a line.
			log.Printf("case %d: %v", i, err)
			failed++
		}
		if i%50 == 0 || i == count {
			log.Printf("ran %d/%d cases in %v", i, count, time.Since(start).Round(time.Millisecond))
		}
	}

	if _, err := fetch(*base+"/updateReports?agent="+url.QueryEscape(*agent), opts); err != nil {
		log.Fatalf("updateReports: %v", err)
	}
	log.Printf("reports updated")
	if failed > 0 {
		log.Printf("%d cases could not be dialled", failed)
		os.Exit(1)
	}
}

// runCase runs one case: echo until the server closes the connection. Only
// a failed dial is an error: how the case ended is for the server to judge.
func runCase(u string, opts *gust.DialOptions, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := echo{done: make(chan error, 1)}
	c, _, err := gust.Dial(ctx, u, h, opts)
	if err != nil {
		return err
	}
	cut := time.AfterFunc(timeout, func() { c.NetConn().Close() })
	defer cut.Stop()
	c.ReadLoop()
	<-h.done
	return nil
}

// fetch dials u and returns the last text message the server sent before
// closing.
func fetch(u string, opts *gust.DialOptions) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := &recorder{done: make(chan error, 1)}
	c, _, err := gust.Dial(ctx, u, r, opts)
	if err != nil {
		return "", err
	}
	c.ReadLoop()
	if err := <-r.done; gust.CloseStatus(err) == 0 {
		return r.text, fmt.Errorf("connection ended without a close frame: %w", err)
	}
	return r.text, nil
}
