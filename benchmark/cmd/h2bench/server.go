package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/gustws/gust"
	"github.com/gustws/gust/internal/selfsigned"
)

// The server role: gust's Upgrader behind net/http over TLS, HTTP/1.1 and
// HTTP/2 on the same port, echoing every message; a plain-HTTP debug port
// answers /stats. It must start with GODEBUG=http2xconnect=1 (the driver
// sets it) for HTTP/2 connections to offer extended CONNECT.

// serverStats is what /stats answers.
type serverStats struct {
	PID             int     `json:"pid"`
	ExtendedConnect bool    `json:"extended_connect"`
	TCPAccepted     int64   `json:"tcp_accepted"`
	WebSockets      int64   `json:"websockets"`
	WebSocketsHTTP2 int64   `json:"websockets_http2"`
	WebSocketsOpen  int64   `json:"websockets_open"`
	Messages        int64   `json:"messages"`
	Goroutines      int     `json:"goroutines"`
	HeapInuse       uint64  `json:"heap_inuse"`
	HeapAlloc       uint64  `json:"heap_alloc"`
	RSSKB           int64   `json:"rss_kb"`
	CPUSeconds      float64 `json:"cpu_seconds"` // user + system, the whole process
}

type benchServer struct {
	gust.BuiltinEventHandler
	tcpAccepted atomic.Int64
	websockets  atomic.Int64
	overHTTP2   atomic.Int64
	open        atomic.Int64
	messages    atomic.Int64
}

func (s *benchServer) OnMessage(c *gust.Conn, m *gust.Message) {
	c.WriteMessage(m.Opcode, m.Data) // a failed write ends the connection and reaches OnClose
	m.Close()
	s.messages.Add(1)
}

func (s *benchServer) OnClose(*gust.Conn, error) { s.open.Add(-1) }

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func runServer(addr, debugAddr string, maxStreams int) error {
	cert, err := selfsigned.Cert(nil, "127.0.0.1")
	if err != nil {
		return err
	}
	s := &benchServer{}
	up := &gust.Upgrader{Handler: s}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := up.Upgrade(w, r)
			if err != nil {
				return
			}
			s.websockets.Add(1)
			s.open.Add(1)
			if r.ProtoMajor == 2 {
				s.overHTTP2.Add(1)
			}
			c.ReadLoop()
		}),
		Protocols: protocols,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		HTTP2:     &http.HTTP2Config{MaxConcurrentStreams: maxStreams},
		ErrorLog:  nil,
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	dln, err := net.Listen("tcp", debugAddr)
	if err != nil {
		return err
	}
	dmux := http.NewServeMux()
	dmux.HandleFunc("/debug/pprof/", pprof.Index) // /debug/pprof/heap etc.
	dmux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	dmux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		gcs, _ := strconv.Atoi(r.URL.Query().Get("gc"))
		for range min(gcs, 5) {
			runtime.GC()
		}
		if r.URL.Query().Get("free") == "1" {
			debug.FreeOSMemory()
		}
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(serverStats{
			PID: os.Getpid(), ExtendedConnect: strings.Contains(os.Getenv("GODEBUG"), "http2xconnect=1"),
			TCPAccepted: s.tcpAccepted.Load(), WebSockets: s.websockets.Load(), WebSocketsHTTP2: s.overHTTP2.Load(),
			WebSocketsOpen: s.open.Load(), Messages: s.messages.Load(), Goroutines: runtime.NumGoroutine(),
			HeapInuse: m.HeapInuse, HeapAlloc: m.HeapAlloc, RSSKB: rssKB(), CPUSeconds: cpuSeconds(),
		})
	})
	dbg := &http.Server{Handler: dmux}
	go dbg.Serve(dln)
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(countingListener{ln, &s.tcpAccepted}, "", "") }()
	fmt.Printf("h2bench-server pid=%d addr=%s debug=%s\n", os.Getpid(), ln.Addr(), dln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	srv.Close()
	dbg.Close()
	return nil
}

// rssKB is VmRSS from /proc/self/status, in KiB (0 where there is no /proc).
func rssKB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// cpuSeconds is this process's user + system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
