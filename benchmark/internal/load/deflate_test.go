package load

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// jsonMessage is a compressible text message like the benchmark's msg-2k.json.
func jsonMessage(n int) []byte {
	var b strings.Builder
	b.WriteString("[")
	for i := 0; b.Len() < n-80; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%d,"name":"user-%d","ts":"2026-11-23T10:%02d:%02dZ","ok":%v}`, 1000+i, i*7, i%60, (i*13)%60, i%2 == 0)
	}
	b.WriteString("]")
	return []byte(b.String())
}

func TestDeflateEcho(t *testing.T) {
	msg := jsonMessage(2048)
	for _, tc := range []struct {
		name      string
		cfg       Config
		srv       *testServer
		maxOut    float64 // the compressed share of what was sent must stay below this
		wantPlain bool    // some messages must go out uncompressed
	}{
		{name: "context takeover, fixed JSON", cfg: Config{Conns: 3, Window: 8, Count: 300, Message: msg}, maxOut: 0.1},
		{name: "context takeover, sequence numbers", cfg: Config{Conns: 2, Window: 16, Count: 400, Size: 2000}, maxOut: 0.95},
		{name: "binary", cfg: Config{Conns: 2, Window: 4, Count: 100, Size: 3000, Binary: true}},
		{name: "no context takeover", cfg: Config{Conns: 2, Window: 8, Count: 300, Message: msg, DeflateNoContext: true}, maxOut: 0.6},
		{name: "bounded client window", cfg: Config{Conns: 2, Window: 8, Count: 300, Size: 300}, srv: &testServer{ClientBits: 9}, maxOut: 0.95},
		{name: "bounded window, fixed JSON", cfg: Config{Conns: 2, Window: 8, Count: 300, Message: msg}, srv: &testServer{ClientBits: 12}, maxOut: 0.2},
		{name: "message over the bounded window goes plain", cfg: Config{Conns: 1, Window: 4, Count: 50, Message: msg}, srv: &testServer{ClientBits: 10}, wantPlain: true},
		{name: "fragmented compressed echoes", cfg: Config{Conns: 2, Window: 8, Count: 200, Message: msg}, srv: &testServer{Fragment: true}},
		{name: "some echoes plain", cfg: Config{Conns: 2, Window: 8, Count: 200, Size: 1500}, srv: &testServer{PlainEvery: 3}},
		{name: "echoes ending with a final block", cfg: Config{Conns: 2, Window: 8, Count: 200, Message: msg}, srv: &testServer{FinalBlock: true}},
		{name: "final blocks, sequence numbers", cfg: Config{Conns: 1, Window: 8, Count: 200, Size: 700}, srv: &testServer{FinalBlock: true, PlainEvery: 5}},
		{name: "tiny messages", cfg: Config{Conns: 1, Window: 8, Count: 100, Size: 5}},
		{name: "empty messages", cfg: Config{Conns: 1, Window: 4, Count: 50, Message: []byte{}}},
		{name: "large messages", cfg: Config{Conns: 1, Window: 2, Count: 4, Size: 300 << 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.srv
			if srv == nil {
				srv = &testServer{}
			}
			srv.Deflate = true
			srv.NeedCompressed = !tc.wantPlain
			tc.cfg.Target = srv.start(t)
			if !tc.cfg.DeflateNoContext {
				tc.cfg.Deflate = true
			}
			res, err := run(t, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := int64(tc.cfg.Conns) * tc.cfg.Count
			if got := res.Messages + res.Drained; got != want {
				t.Fatalf("echoed %d messages, want %d", got, want)
			}
			if !res.Verified || !strings.HasPrefix(res.Deflate, "permessage-deflate") {
				t.Fatalf("odd result %+v", res)
			}
			if tc.maxOut > 0 && res.DeflateOutRatio > tc.maxOut {
				t.Fatalf("sent %.1f%% of the payload; want under %.0f%%", 100*res.DeflateOutRatio, 100*tc.maxOut)
			}
			if tc.wantPlain && srv.sawUncompressed.Load() == 0 {
				t.Fatal("every message went out compressed")
			}
			if !tc.wantPlain && srv.sawCompressedMsg.Load() != want {
				t.Fatalf("the server saw %d compressed messages, want %d", srv.sawCompressedMsg.Load(), want)
			}
			t.Logf("%s: out %.1f%%, in %.1f%%", res.Deflate, 100*res.DeflateOutRatio, 100*res.DeflateInRatio)
		})
	}
}

func TestDeflateCorruptedEchoIsAnError(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"context takeover", Config{Deflate: true}},
		{"no context takeover", Config{DeflateNoContext: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testServer{Deflate: true, CorruptDeflated: 7}
			cfg := tc.cfg
			cfg.Target, cfg.Conns, cfg.Window, cfg.Count, cfg.Message = srv.start(t), 1, 4, 50, jsonMessage(2048)
			_, err := run(t, cfg)
			if err == nil {
				t.Fatal("a corrupted compressed echo passed")
			}
			if !strings.Contains(err.Error(), "message 6: ") {
				t.Fatalf("error %q; want it to blame message 6", err)
			}
			t.Log(err)
		})
	}
}

func TestDeflateDeclinedIsAnError(t *testing.T) {
	srv := testServer{}
	_, err := run(t, Config{Target: srv.start(t), Conns: 1, Count: 1, Deflate: true})
	mustFail(t, err, "declined permessage-deflate")
}

func TestDeflateBadResponseIsAnError(t *testing.T) {
	for resp, want := range map[string]string{
		"permessage-deflate; foo":                                                    "unknown parameter foo",
		"permessage-deflate; client_max_window_bits=16":                              "bad client_max_window_bits",
		"permessage-deflate; server_max_window_bits":                                 "bad server_max_window_bits",
		"permessage-deflate; client_no_context_takeover; client_no_context_takeover": "repeats",
		"permessage-deflate, permessage-deflate":                                     "only permessage-deflate was offered",
		"x-webkit-deflate-frame":                                                     "only permessage-deflate was offered",
		"permessage-deflate; server_no_context_takeover=1":                           "takes no value",
	} {
		srv := testServer{Deflate: true, DeflateResponse: resp}
		_, err := run(t, Config{Target: srv.start(t), Conns: 1, Count: 1, Deflate: true})
		mustFail(t, err, want)
	}
	srv := testServer{Deflate: true, DeflateResponse: "permessage-deflate; client_no_context_takeover"}
	_, err := run(t, Config{Target: srv.start(t), Conns: 1, Count: 1, DeflateNoContext: true})
	mustFail(t, err, "lacks the server_no_context_takeover")
}

func TestAcceptDeflate(t *testing.T) {
	for _, tc := range []struct {
		resp      string
		noContext bool
		want      deflateParams
	}{
		{"permessage-deflate", false, deflateParams{serverBits: 15, clientBits: 15}},
		{"Permessage-Deflate ;server_max_window_bits=12 ; client_max_window_bits=\"10\"", false, deflateParams{serverBits: 12, clientBits: 10}},
		{"permessage-deflate; server_no_context_takeover; client_no_context_takeover", true,
			deflateParams{serverNoContext: true, clientNoContext: true, serverBits: 15, clientBits: 15}},
		{"permessage-deflate; server_no_context_takeover", true, // we reset ours anyway
			deflateParams{serverNoContext: true, clientNoContext: true, serverBits: 15, clientBits: 15}},
	} {
		p, ok, err := acceptDeflate(tc.resp, tc.noContext)
		if err != nil || !ok {
			t.Fatalf("%q: %v, %v", tc.resp, ok, err)
		}
		p.response = ""
		if p != tc.want {
			t.Fatalf("%q: %+v, want %+v", tc.resp, p, tc.want)
		}
	}
	if _, ok, err := acceptDeflate("", false); ok || err != nil {
		t.Fatalf("an empty answer: %v, %v; want declined", ok, err)
	}
	for _, bad := range []string{"permessage-deflate; ", "permessage-deflate; a=\"x", "permessage-deflate; client_max_window_bits=09", ";x"} {
		if _, _, err := acceptDeflate(bad, false); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// The bounded-window compressor never reaches further back than the window: every message
// inflates with exactly the last window bytes as its dictionary, over many messages.
func TestDeflaterBoundedWindow(t *testing.T) {
	for _, bits := range []int{8, 9, 12, 14} {
		d := newDeflater(deflateParams{clientBits: bits, serverBits: 15})
		var hist []byte
		msg := jsonMessage(3000)
		for i := 0; i < 200; i++ {
			p := msg[:(i*37)%len(msg)]
			z, ok, err := d.compress(nil, p)
			if err != nil {
				t.Fatal(err)
			}
			if len(p) > 1<<bits {
				if ok {
					t.Fatalf("bits %d: a %d-byte message was compressed", bits, len(p))
				}
				continue
			}
			if !ok {
				t.Fatalf("bits %d: a %d-byte message was not compressed", bits, len(p))
			}
			fr := flate.NewReaderDict(io.MultiReader(bytes.NewReader(z), bytes.NewReader(finalTail)), hist)
			out, err := io.ReadAll(fr)
			if err != nil || !bytes.Equal(out, p) {
				t.Fatalf("bits %d, message %d (%d bytes): %v", bits, i, len(p), err)
			}
			hist = lastN(append(hist, p...), 1<<bits)
		}
	}
}

func TestIdleAfterEcho(t *testing.T) {
	srv := testServer{Deflate: true, NeedCompressed: true}
	res, err := run(t, Config{Target: srv.start(t), Conns: 50, Idle: true, Count: 1, Message: jsonMessage(2048),
		Deflate: true, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != "idle" || res.Messages != 50 || !res.Verified || srv.sawCompressedMsg.Load() != 50 {
		t.Fatalf("odd result %+v", res)
	}
	// A server that hangs up during the hold fails the run.
	srv2 := testServer{CloseAfter: 1}
	_, err = run(t, Config{Target: srv2.start(t), Conns: 3, Idle: true, Count: 1, Duration: 500 * time.Millisecond})
	mustFail(t, err, "server closed the connection")
}

// peakStats is a stand-in for echoserver's /debug/stats: 1 MiB of heap in use, and 1 MiB more
// at the peak it reports on ?peak=stop once ?peak=start came first.
type peakStats struct {
	mu     sync.Mutex
	calls  []string // the peak= values, in order
	server *httptest.Server
}

func (p *peakStats) start(t *testing.T) string {
	p.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peak := r.URL.Query().Get("peak")
		p.mu.Lock()
		p.calls = append(p.calls, peak)
		p.mu.Unlock()
		s := map[string]any{"heap_inuse": 1 << 20, "heap_alloc": 1 << 20, "goroutines": 1}
		if peak == "stop" {
			s["heap_inuse_peak"] = 2 << 20
			s["rss_peak_kb"] = 1 << 30 // far above gustload's own RSS, which stands for the server's
		}
		_ = json.NewEncoder(w).Encode(s)
	}))
	t.Cleanup(p.server.Close)
	return p.server.URL + "/debug/stats"
}

// TestPeakDuringEchoes checks that idle mode with a count samples the server's peak memory
// over the echoes, and -recv-only over the measured phase.
func TestPeakDuringEchoes(t *testing.T) {
	var stats peakStats
	srv := testServer{Deflate: true}
	res, err := run(t, Config{Target: srv.start(t), Conns: 16, Idle: true, Count: 1, Message: jsonMessage(2048),
		Deflate: true, Duration: 100 * time.Millisecond, StatsURL: stats.start(t), ServerPID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	if res.ServerHeapPeakKB != 2048 || res.PeakHeapPerConnKB != 1024.0/16 || res.PeakRSSPerConnKB <= 0 {
		t.Fatalf("peaks %v KiB, %v and %v KiB per connection", res.ServerHeapPeakKB, res.PeakHeapPerConnKB, res.PeakRSSPerConnKB)
	}
	stats.mu.Lock()
	calls := strings.Join(stats.calls, ",")
	stats.mu.Unlock()
	// before the ramp, the burst's start and stop, then the two readings after the hold
	if calls != ",start,stop,," {
		t.Fatalf("stats requests %q", calls)
	}

	var stats2 peakStats
	push := testServer{Push: 100}
	res, err = run(t, Config{Target: push.start(t), Conns: 4, RecvOnly: true, Duration: 200 * time.Millisecond, StatsURL: stats2.start(t)})
	if err != nil {
		t.Fatal(err)
	}
	if res.PeakHeapPerConnKB != 1024.0/4 {
		t.Fatalf("recv-only peak %v KiB per connection", res.PeakHeapPerConnKB)
	}
}
