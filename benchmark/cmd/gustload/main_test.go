package main

import (
	"bytes"
	"encoding/json"
	"net"
	"strings"
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
