package servers

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gustws/gust/benchmark/internal/load"
)

// skipUnderRace names servers whose library trips the race detector by itself (race_test.go).
var skipUnderRace = map[string]string{}

// Every server echoes text and binary messages, small and large, verified by gustload's engine.
func TestServersEcho(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			if why, ok := skipUnderRace[name]; ok {
				t.Skip(why)
			}
			srv, err := Start(name, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			masked := name == "raw-copy" || name == "raw-buf"
			for _, cfg := range []load.Config{
				{Conns: 4, Window: 16, Count: 200, Size: 300},
				{Conns: 2, Window: 4, Count: 50, Size: 70000, Binary: true},
				{Conns: 1, Window: 2, Count: 4, Size: 1 << 20, Binary: true},
			} {
				cfg.Target = srv.Addr() + "/"
				if strings.HasSuffix(name, "-tls") {
					cfg.Target = "wss://" + cfg.Target
				}
				cfg.AllowMasked = masked
				cfg.Timeout = 5 * time.Second
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res, err := load.Run(ctx, cfg)
				cancel()
				if err != nil {
					t.Fatalf("%d x %d bytes: %v", cfg.Conns, cfg.Size, err)
				}
				if got, want := res.Messages+res.Drained, int64(cfg.Conns)*cfg.Count; got != want {
					t.Fatalf("%d x %d bytes: %d echoes, want %d", cfg.Conns, cfg.Size, got, want)
				}
			}
		})
	}
}

func TestUnknownServer(t *testing.T) {
	if _, err := Start("nope", "127.0.0.1:0"); err == nil {
		t.Fatal("started an unknown server")
	}
}

// The -deflate servers negotiate permessage-deflate with gustload's offer (context takeover
// both ways, and none) and echo compressed messages that gustload inflates and verifies.
func TestDeflateServersEcho(t *testing.T) {
	json, err := os.ReadFile("../testdata/msg-2k.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Names() {
		if !strings.Contains(name, "-deflate") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			srv, err := Start(name, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			for _, cfg := range []load.Config{
				{Conns: 4, Window: 16, Count: 300, Message: json, Deflate: true},
				{Conns: 2, Window: 8, Count: 200, Size: 2000, Deflate: true},
				{Conns: 2, Window: 4, Count: 20, Size: 200000, Binary: true, Deflate: true},
				{Conns: 2, Window: 8, Count: 200, Message: json, DeflateNoContext: true},
			} {
				cfg.Target = srv.Addr() + "/"
				cfg.Timeout = 5 * time.Second
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res, err := load.Run(ctx, cfg)
				cancel()
				if err != nil {
					t.Fatalf("%d x %d bytes: %v", cfg.Conns, len(cfg.Message)+cfg.Size, err)
				}
				if got, want := res.Messages+res.Drained, int64(cfg.Conns)*cfg.Count; got != want {
					t.Fatalf("%d echoes, want %d", got, want)
				}
				if res.DeflateInRatio >= 1 && cfg.Message != nil {
					t.Fatalf("%s: the echoes were not compressed (%.2f)", res.Deflate, res.DeflateInRatio)
				}
				t.Logf("%s: out %.1f%%, in %.1f%%", res.Deflate, 100*res.DeflateOutRatio, 100*res.DeflateInRatio)
			}
		})
	}
}
