package main

import (
	"net"
	"strings"
	"testing"
	"time"
)

func startServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go serve(ln, nil) // no t.Logf: a connection may end after its test
	return "ws://" + ln.Addr().String() + "/"
}

// Every client, every payload, a few messages each way: the runs complete, every sample is
// there and the report has a row per count and direction.
func TestRunAllClients(t *testing.T) {
	url := startServer(t)
	ps, err := loadPayloads("../../testdata", payloadNames)
	if err != nil {
		t.Fatal(err)
	}
	cfg := benchConfig{url: url, clients: clientNames, payloads: ps, counts: []int{1, 7}, reps: 2, warmup: 3, opTimeout: 20 * time.Second}
	all, err := runBench(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(ps) * 2 * 2 * len(clientNames) * 3; len(all) != want {
		t.Fatalf("%d samples, want %d", len(all), want)
	}
	for _, s := range all {
		if s.Ms <= 0 && s.Dir != "in-first" {
			t.Errorf("sample %+v: no time", s)
		}
	}
	md := markdown(all, cfg, reportInfo{reps: 2, warmup: 3})
	for _, p := range ps {
		if !strings.Contains(md, p.title) {
			t.Errorf("report lacks %q", p.title)
		}
	}
	if !strings.Contains(md, "| 7 | In, from the 1st |") {
		t.Errorf("report lacks a row:\n%s", md)
	}
}

// A message that is not the payload fails the run, on both sides.
func TestMismatchFails(t *testing.T) {
	url := startServer(t)
	for _, name := range defaultClients {
		c, err := dial(name, url)
		if err != nil {
			t.Fatal(err)
		}
		p := payload{name: "x", op: 2, data: []byte("0123456789")}
		if err := c.write(1, []byte("load")); err != nil {
			t.Fatal(err)
		}
		c.write(p.op, p.data)
		if s, _, err := c.readText(); err != nil || s != "ok" {
			t.Fatalf("%s: load: %q %v", name, s, err)
		}
		// the server's messages are the payload; the client expects something else
		other := payload{op: 2, data: []byte("0123456780")}
		if _, _, err := in(c, other, 1); err == nil || !strings.Contains(err.Error(), "differs") {
			t.Errorf("%s: in with another payload: %v", name, err)
		}
		// the client sends text where the server expects binary: the server answers with an
		// error and closes (the client may see the answer or, the close being a reset, not)
		wrongType := payload{op: 1, data: p.data}
		if _, err := out(c, wrongType, 2); err == nil {
			t.Errorf("%s: out with the wrong type: %v", name, err)
		}
		c.close()
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{5}, 5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
