// Package servers holds one small WebSocket echo server per library under test, each written
// the way that library's documentation recommends, and three raw TCP references.
//
// Every server echoes each message it receives, with the same type, on any path. A file per
// library registers its server in init; cmd/echoserver starts one by name.
//
// The bcast-* servers (broadcast_*.go) broadcast instead of echoing when BROADCAST_CONNS is set
// (scripts/bench-broadcast does); otherwise they echo like the others.
package servers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"time"
)

// Server is a running echo server.
type Server interface {
	// Addr is the address the server listens on (host:port).
	Addr() string
	// Close stops accepting and closes the listener; open connections may linger.
	Close() error
}

// StartFunc starts a server listening on addr ("127.0.0.1:0" picks a free port).
type StartFunc func(addr string) (Server, error)

type entry struct {
	start StartFunc
	doc   string
}

var registry = map[string]entry{}

// register is called from init functions only, before main runs.
func register(name, doc string, start StartFunc) {
	if _, dup := registry[name]; dup {
		panic("servers: duplicate name " + name)
	}
	registry[name] = entry{start: start, doc: doc}
}

// Names lists the registered servers in alphabetical order.
func Names() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Doc is a one-line description of a server.
func Doc(name string) string { return registry[name].doc }

// Start starts the named server on addr.
func Start(name, addr string) (Server, error) {
	e, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("servers: unknown server %q (have %v)", name, Names())
	}
	return e.start(addr)
}

// MaxMessage is the largest message every server accepts, set where a library's default is
// smaller than the benchmark needs (1 MiB messages in scenario d).
const MaxMessage = 16 << 20

// httpServer runs a net/http server for the libraries that upgrade from a handler.
type httpServer struct {
	ln  net.Listener
	srv *http.Server
}

func serveHTTP(addr string, h http.HandlerFunc) (Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", h)
	s := &httpServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Printf("http serve: %v\n", err)
		}
	}()
	return s, nil
}

func (s *httpServer) Addr() string { return s.ln.Addr().String() }

func (s *httpServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx) // hijacked connections are not tracked; they end with the process
}
