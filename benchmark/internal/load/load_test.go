package load

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func run(t *testing.T, cfg Config) (*Result, error) {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Duration == 0 && cfg.Count == 0 {
		cfg.Duration = 300 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return Run(ctx, cfg)
}

func mustFail(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the run succeeded; want an error containing %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q; want it to contain %q", err, want)
	}
}

func TestEchoCountsExactly(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		srv  *testServer
	}{
		{name: "text", cfg: Config{Conns: 3, Window: 8, Count: 500, Size: 300}},
		{name: "binary", cfg: Config{Conns: 2, Window: 4, Count: 300, Size: 2396, Binary: true}},
		{name: "fixed message", cfg: Config{Conns: 2, Window: 16, Count: 400, Message: []byte("hello, gust")}},
		{name: "tiny payload", cfg: Config{Conns: 1, Window: 3, Count: 100, Size: 5}},
		{name: "empty payload", cfg: Config{Conns: 1, Window: 3, Count: 100, Message: []byte{}}},
		{name: "large messages", cfg: Config{Conns: 1, Window: 2, Count: 6, Size: 1 << 20, Binary: true}},
		{name: "fragmented echoes", cfg: Config{Conns: 2, Window: 8, Count: 300, Size: 1000}, srv: &testServer{Fragment: true}},
		{name: "masked echoes allowed", cfg: Config{Conns: 2, Window: 8, Count: 300, Size: 300, AllowMasked: true}, srv: &testServer{MaskedEcho: true}},
		{name: "ping answered", cfg: Config{Conns: 1, Window: 1, Count: 50}, srv: &testServer{PingFirst: true}},
		{name: "rate limited", cfg: Config{Conns: 2, Window: 4, Count: 40, Rate: 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.srv
			if srv == nil {
				srv = &testServer{}
			}
			tc.cfg.Target = srv.start(t)
			res, err := run(t, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := int64(tc.cfg.Conns) * tc.cfg.Count
			if got := res.Messages + res.Drained; got != want {
				t.Fatalf("echoed %d messages (%d + %d drained), want %d", got, res.Messages, res.Drained, want)
			}
			if !res.Verified || res.LatP50Ms <= 0 || res.LatMaxMs < res.LatP99Ms || res.MsgPerSec <= 0 {
				t.Fatalf("odd result %+v", res)
			}
		})
	}
}

func TestRateLimitHolds(t *testing.T) {
	srv := testServer{}
	res, err := run(t, Config{Target: srv.start(t), Conns: 2, Window: 8, Rate: 100, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.MsgPerSec < 150 || res.MsgPerSec > 260 {
		t.Fatalf("%.0f msg/s over 2 connections at 100 msg/s each", res.MsgPerSec)
	}
}

func TestDurationBoundsTheRun(t *testing.T) {
	srv := testServer{}
	start := time.Now()
	res, err := run(t, Config{Target: srv.start(t), Conns: 4, Window: 16, Duration: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("a 0.5 s run took %v", d)
	}
	if res.Messages == 0 || res.Seconds < 0.45 || res.Seconds > 1 {
		t.Fatalf("odd result %+v", res)
	}
}

func TestCorruptedEchoIsAnError(t *testing.T) {
	srv := testServer{CorruptMsg: 77}
	_, err := run(t, Config{Target: srv.start(t), Conns: 1, Window: 8, Count: 200, Size: 300})
	mustFail(t, err, "message 76: echo differs from what was sent at byte 150")
}

func TestCorruptedFixedMessageIsAnError(t *testing.T) {
	srv := testServer{CorruptMsg: 5}
	_, err := run(t, Config{Target: srv.start(t), Conns: 2, Window: 4, Count: 50, Message: []byte("0123456789")})
	mustFail(t, err, "echo differs")
}

func TestDroppedEchoIsAnError(t *testing.T) {
	// With sequence numbers the next echo gives the drop away at once.
	srv := testServer{DropMsg: 10}
	_, err := run(t, Config{Target: srv.start(t), Conns: 1, Window: 4, Count: 100, Size: 64})
	mustFail(t, err, "message 9: echo differs")
}

func TestDroppedLastEchoTimesOut(t *testing.T) {
	// A fixed message has no sequence number: the missing echo shows as a timeout.
	srv := testServer{DropMsg: 30}
	start := time.Now()
	_, err := run(t, Config{Target: srv.start(t), Conns: 1, Window: 1, Count: 30, Message: []byte("ping"),
		Timeout: 500 * time.Millisecond})
	mustFail(t, err, "not echoed within 500ms")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the timeout took %v", d)
	}
}

func TestDroppedEchoInTimedRunIsAnError(t *testing.T) {
	srv := testServer{DropMsg: 3}
	_, err := run(t, Config{Target: srv.start(t), Conns: 1, Window: 1, Duration: 3 * time.Second,
		Message: []byte("ping"), Timeout: 500 * time.Millisecond})
	mustFail(t, err, "not echoed within 500ms")
}

func TestServerCloseIsAnError(t *testing.T) {
	t.Run("tcp close", func(t *testing.T) {
		srv := testServer{CloseAfter: 20}
		_, err := run(t, Config{Target: srv.start(t), Conns: 1, Window: 4, Count: 100})
		mustFail(t, err, "server closed the connection")
	})
	t.Run("close frame", func(t *testing.T) {
		srv := testServer{CloseAfter: 20, ServerClose: true}
		_, err := run(t, Config{Target: srv.start(t), Conns: 1, Window: 4, Count: 100})
		mustFail(t, err, "server sent a close frame (code 1001")
	})
	t.Run("in a timed run", func(t *testing.T) {
		srv := testServer{CloseAfter: 1000}
		_, err := run(t, Config{Target: srv.start(t), Conns: 2, Window: 8, Duration: 5 * time.Second})
		mustFail(t, err, "server closed the connection")
	})
}

func TestMaskedEchoRefusedByDefault(t *testing.T) {
	srv := testServer{MaskedEcho: true}
	_, err := run(t, Config{Target: srv.start(t), Conns: 1, Window: 1, Count: 10})
	mustFail(t, err, "masked frame from the server")
}

func TestBadAcceptIsAnError(t *testing.T) {
	srv := testServer{BadAccept: true}
	_, err := run(t, Config{Target: srv.start(t), Conns: 1, Count: 1})
	mustFail(t, err, "Sec-WebSocket-Accept")
}

func TestNoServerIsAnError(t *testing.T) {
	srv := testServer{}
	addr := srv.start(t)
	srv.ln.Close()
	_, err := run(t, Config{Target: addr, Conns: 1, Count: 1})
	mustFail(t, err, "connection refused")
}

func TestRecvOnlyCounts(t *testing.T) {
	srv := testServer{Push: 250}
	res, err := run(t, Config{Target: srv.start(t), Conns: 3, RecvOnly: true, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The server pushes at once: what arrives before the measured phase begins is counted
	// apart, so that msg/s and the server's CPU cover the same time.
	if got := res.Early + res.Messages + res.Drained; got != 750 || res.Verified {
		t.Fatalf("received %d+%d+%d (verified %v), want 750 unverified", res.Early, res.Messages, res.Drained, res.Verified)
	}
}

func TestRecvOnlySeqCount(t *testing.T) {
	srv := testServer{Push: 50, PushSeq: true}
	res, err := run(t, Config{Target: srv.start(t), Conns: 4, RecvOnly: true, Seq: true, Count: 50, Duration: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Early + res.Messages; got != 200 {
		t.Fatalf("received %d+%d, want 200", res.Early, res.Messages)
	}
	if s := res.Seq; s == nil || *s != (SeqRange{FirstMin: 1, FirstMax: 1, LastMin: 50, LastMax: 50}) {
		t.Fatalf("sequence range %+v", s)
	}
	if res.Seconds > 4 {
		t.Fatalf("the run took %.1fs: it should end once every connection has its 50 messages", res.Seconds)
	}
}

func TestRecvOnlySeqLost(t *testing.T) {
	srv := testServer{Push: 20, PushSeq: true, PushSkip: 7}
	_, err := run(t, Config{Target: srv.start(t), Conns: 2, RecvOnly: true, Seq: true, Duration: time.Second})
	mustFail(t, err, "sequence number 8 after 6 (lost)")
}

func TestRecvOnlySeqMissing(t *testing.T) {
	srv := testServer{Push: 5}
	_, err := run(t, Config{Target: srv.start(t), Conns: 1, RecvOnly: true, Seq: true, Duration: time.Second})
	mustFail(t, err, "no sequence number")
}

func TestRecvOnlyCountShort(t *testing.T) {
	srv := testServer{Push: 10, PushSeq: true}
	_, err := run(t, Config{Target: srv.start(t), Conns: 3, RecvOnly: true, Seq: true, Count: 11, Duration: 300 * time.Millisecond})
	mustFail(t, err, "3 of 3 connections received fewer than 11 messages")
}

func TestIdleHoldsConnections(t *testing.T) {
	srv := testServer{}
	res, err := run(t, Config{Target: srv.start(t), Conns: 200, Idle: true, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != "idle" || res.Conns != 200 {
		t.Fatalf("odd result %+v", res)
	}
}

func TestIdleNoticesClosedConnections(t *testing.T) {
	srv := testServer{HangUp: true}
	_, err := run(t, Config{Target: srv.start(t), Conns: 5, Idle: true, Duration: 100 * time.Millisecond})
	mustFail(t, err, "closed by the server during the hold")
}

func TestParseTarget(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:3000":            "127.0.0.1:3000 /",
		"127.0.0.1:3000/connect":    "127.0.0.1:3000 /connect",
		"ws://127.0.0.1:3000/a?b=c": "127.0.0.1:3000 /a?b=c",
		"ws://localhost/x":          "localhost:80 /x",
		"ws://[::1]:9/":             "[::1]:9 /",
	} {
		tg, err := parseTarget(in)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got := tg.host + " " + tg.path; got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"wss://x:1/a": "x:1 /a", "wss://x": "x:443 /"} {
		tg, err := parseTarget(in)
		if err != nil || !tg.tls || tg.host+" "+tg.path != want {
			t.Errorf("%s: %+v, %v; want %q over TLS", in, tg, err, want)
		}
	}
	if tg, _ := parseTarget("ws://x:1/"); tg.tls {
		t.Error("ws:// over TLS")
	}
}

func TestSourceAddrs(t *testing.T) {
	tg, _ := parseTarget("127.0.0.1:1")
	c := Config{Conns: 50000}
	ips, err := c.sourceAddrs(tg)
	if err != nil || len(ips) != 3 || ips[0].String() != "127.0.0.2" || ips[2].String() != "127.0.0.4" {
		t.Fatalf("%v %v", ips, err)
	}
	c = Config{Conns: 100}
	if ips, _ := c.sourceAddrs(tg); ips != nil {
		t.Fatalf("%v for 100 connections", ips)
	}
	tg, _ = parseTarget("10.0.0.1:1")
	c = Config{Conns: 50000}
	if _, err := c.sourceAddrs(tg); err == nil {
		t.Fatal("source addresses for a non-loopback target")
	}
}

func TestSourceAddrsConnect(t *testing.T) {
	srv := testServer{}
	res, err := run(t, Config{Target: srv.start(t), Conns: 6, SourceAddrs: 3, Window: 2, Count: 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.Messages+res.Drained != 120 {
		t.Fatalf("%+v", res)
	}
}

func TestMaskBytes(t *testing.T) {
	key := [4]byte{1, 2, 3, 4}
	for n := 0; n < 40; n++ {
		for pos := 0; pos < 4; pos++ {
			b := bytes.Repeat([]byte{0xaa}, n)
			want := make([]byte, n)
			for i := range want {
				want[i] = 0xaa ^ key[(pos+i)&3]
			}
			if next := maskBytes(key, pos, b); next != (pos+n)&3 {
				t.Fatalf("n=%d pos=%d: next %d", n, pos, next)
			}
			if !bytes.Equal(b, want) {
				t.Fatalf("n=%d pos=%d: %x, want %x", n, pos, b, want)
			}
		}
	}
	// Masking in pieces equals masking at once.
	whole := bytes.Repeat([]byte("gust"), 50)
	pieces := append([]byte(nil), whole...)
	maskBytes(key, 0, whole)
	pos := 0
	for i := 0; i < len(pieces); i += 7 {
		pos = maskBytes(key, pos, pieces[i:min(i+7, len(pieces))])
	}
	if !bytes.Equal(whole, pieces) {
		t.Fatal("masking in pieces differs")
	}
}

func TestHistogram(t *testing.T) {
	var h Histogram
	for v := uint64(1); v <= 100000; v++ {
		h.Record(v * 1000)
	}
	check := func(name string, got, want uint64) {
		t.Helper()
		if d := float64(got)/float64(want) - 1; d < -0.02 || d > 0.02 {
			t.Errorf("%s = %d, want %d within 2%%", name, got, want)
		}
	}
	check("p50", h.Quantile(.5), 50000*1000)
	check("p90", h.Quantile(.9), 90000*1000)
	check("p99", h.Quantile(.99), 99000*1000)
	if h.Max() != 100000*1000 || h.Min() != 1000 || h.Count() != 100000 {
		t.Errorf("max %d min %d count %d", h.Max(), h.Min(), h.Count())
	}
	if m := h.Mean(); m != 50000.5*1000 {
		t.Errorf("mean %v", m)
	}
	for v := uint64(0); v < 1<<20; v = v*3/2 + 1 {
		if b := bucketOf(v); bucketHigh(b) < v || (b > 0 && bucketHigh(b-1) >= v) {
			t.Fatalf("value %d in bucket %d [.., %d]", v, b, bucketHigh(b))
		}
	}
	var empty Histogram
	if empty.Quantile(.5) != 0 || empty.Min() != 0 {
		t.Error("empty histogram")
	}
}
