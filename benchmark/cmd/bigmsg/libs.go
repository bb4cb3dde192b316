package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
)

// A sender dials c.addr and sends src as one binary message, waits for the
// receiver's "ok N" and returns the bytes sent.
// Each library's file registers its own: a binary built with -tags
// only_gust, only_gorilla or only_coder links that library alone, so that
// its peak RSS is that library's and the runtime's, not the others' code.
var senders = map[string]func(c config, src io.Reader) (int64, error){}

// A receiver accepts one connection on c.addr, calls started, copies one
// message into dst, answers "ok N" and returns N.
var receivers = map[string]func(c config, dst io.Writer, started func()) (int64, error){}

// listen listens on addr and says so on stderr, where scripts/bench-bigmsg
// waits for it before it starts the sender.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		fmt.Fprintln(os.Stderr, "bigmsg: listening on", ln.Addr())
	}
	return ln, err
}

func checkAnswer(answer string, n int64) error {
	if answer != fmt.Sprintf("ok %d", n) {
		return fmt.Errorf("the receiver answered %q to %d bytes", answer, n)
	}
	return nil
}

// receiveOnce serves HTTP on addr until handle has taken one connection,
// and returns what handle returned.
func receiveOnce(addr string, handle func(w http.ResponseWriter, r *http.Request) (int64, error)) (int64, error) {
	type outcome struct {
		n   int64
		err error
	}
	done := make(chan outcome, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := handle(w, r)
		done <- outcome{n, err}
	})}
	ln, err := listen(addr)
	if err != nil {
		return 0, err
	}
	go srv.Serve(ln)
	o := <-done
	srv.Close()
	return o.n, o.err
}
