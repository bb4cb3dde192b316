package main

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gustws/gust/benchmark/servers"
)

func TestJSONResult(t *testing.T) {
	srv, err := servers.Start("raw-record", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var out, errOut bytes.Buffer
	code := run([]string{"-q", "-json", "-label", "raw-record", "-c", "2", "-w", "8", "-n", "100", "--ws", srv.Addr() + "/"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var res struct {
		Label    string `json:"label"`
		Messages int64  `json:"messages"`
		Drained  int64  `json:"drained"`
		Verified bool   `json:"verified"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %q", err, out.String())
	}
	if res.Label != "raw-record" || res.Messages+res.Drained != 200 || !res.Verified {
		t.Fatalf("%+v", res)
	}
	if !strings.Contains(errOut.String(), "every one verified") {
		t.Fatalf("no summary on stderr: %q", errOut.String())
	}
}

func TestFailureExitsNonZeroWithoutNumbers(t *testing.T) {
	// A "server" that accepts and hangs up: the handshake fails.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var out, errOut bytes.Buffer
	code := run([]string{"-q", "-json", "-T", "1", ln.Addr().String()}, &out, &errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(errOut.String(), "FAIL") || strings.Contains(out.String(), "msg_per_sec") ||
		!strings.Contains(out.String(), `"error"`) {
		t.Fatalf("stdout %q stderr %q", out.String(), errOut.String())
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"a:1", "b:2"},
		{"-m", "x", "-p", "10", "a:1"},
		{"-ws=false", "a:1"},
		{"-T", "soon", "a:1"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

func TestDurationFlag(t *testing.T) {
	for in, want := range map[string]time.Duration{"20": 20 * time.Second, "1.5": 1500 * time.Millisecond, "2m": 2 * time.Minute, "250ms": 250 * time.Millisecond} {
		var d time.Duration
		if err := (duration{&d}).Set(in); err != nil || d != want {
			t.Errorf("%s: %v %v", in, d, err)
		}
	}
}

// TestPingAtEnd: every connection pings at the end of the hold and every pong is counted, with
// gust's server in both modes, and with -n (the readers running) as well as without.
func TestPingAtEnd(t *testing.T) {
	for _, tc := range []struct{ lib, n string }{{"gust", "0"}, {"gust-netpoll", "0"}, {"gust-netpoll", "3"}} {
		t.Run(tc.lib+"/n="+tc.n, func(t *testing.T) {
			srv, err := servers.Start(tc.lib, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			var out, errOut bytes.Buffer
			code := run([]string{"-q", "-json", "-idle", "-ping-at-end", "-ping-timeout", "10s", "-n", tc.n, "-T", "0.2", "-c", "300",
				"-pid", strconv.Itoa(os.Getpid()), srv.Addr() + "/"}, &out, &errOut) // the server runs in this process
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			var res struct {
				Pings       int64   `json:"pings_answered"`
				PingSeconds float64 `json:"ping_seconds"`
				RSSAfter    int64   `json:"server_rss_after_ping_kb"`
			}
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("%v: %q", err, out.String())
			}
			if res.Pings != 300 || res.PingSeconds <= 0 || res.RSSAfter <= 0 {
				t.Fatalf("%+v", res)
			}
			if !strings.Contains(errOut.String(), "Pinged every connection: 300 pongs") {
				t.Fatalf("no ping line in the summary: %q", errOut.String())
			}
		})
	}
}

// TestPingAtEndFailsWithoutPongs: a server that completes the handshake and then answers
// nothing fails the run once -ping-timeout has passed, saying how many answered.
func TestPingAtEndFailsWithoutPongs(t *testing.T) {
	addr := silentServer(t)
	var out, errOut bytes.Buffer
	began := time.Now()
	code := run([]string{"-q", "-json", "-idle", "-ping-at-end", "-ping-timeout", "300ms", "-T", "0.1", "-c", "20", addr}, &out, &errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "0 of 20 connections answered within 300ms (20 silent") {
		t.Fatalf("stdout %q", out.String())
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("took %v: the wait for the pongs is not bounded by -ping-timeout", d)
	}
}

// TestUSR1EndsTheHold: SIGUSR1 ends an idle hold of a minute at once.
func TestUSR1EndsTheHold(t *testing.T) {
	// Notified here too, so that a signal sent before gustload's own Notify is not fatal.
	mine := make(chan os.Signal, 16)
	signal.Notify(mine, syscall.SIGUSR1)
	defer signal.Stop(mine)
	srv, err := servers.Start("gust-netpoll", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	done := make(chan int, 1)
	var out, errOut bytes.Buffer
	began := time.Now()
	go func() {
		done <- run([]string{"-q", "-json", "-idle", "-ping-at-end", "-T", "1m", "-c", "10", srv.Addr() + "/"}, &out, &errOut)
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			if d := time.Since(began); d > 20*time.Second || !strings.Contains(out.String(), `"pings_answered":10`) {
				t.Fatalf("after %v: %s", d, out.String())
			}
			return
		case <-tick.C:
			if time.Since(began) > 30*time.Second {
				t.Fatal("SIGUSR1 did not end the hold")
			}
			_ = syscall.Kill(os.Getpid(), syscall.SIGUSR1)
		}
	}
}

// silentServer completes the WebSocket handshake on every connection and then reads and
// discards whatever comes: pings get no pong.
func silentServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				key := ""
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					line = strings.TrimSpace(line)
					if line == "" {
						break
					}
					if name, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(name, "Sec-WebSocket-Key") {
						key = strings.TrimSpace(v)
					}
				}
				sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
				_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+
					base64.StdEncoding.EncodeToString(sum[:])+"\r\n\r\n")
				_, _ = io.Copy(io.Discard, br)
			}()
		}
	}()
	return ln.Addr().String()
}
