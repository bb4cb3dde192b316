//go:build !only_gorilla && !only_coder

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/gustws/gust"
)

func init() {
	senders["gust"] = gustSend
	receivers["gust"] = gustReceive
}

type gustClient struct {
	gust.BuiltinEventHandler
	answer chan string
	closed chan error
}

func (h *gustClient) OnMessage(_ *gust.Conn, m *gust.Message) {
	h.answer <- string(m.Data)
	m.Close()
}

func (h *gustClient) OnClose(_ *gust.Conn, err error) { h.closed <- err }

func gustSend(c config, src io.Reader) (int64, error) {
	h := &gustClient{answer: make(chan string, 1), closed: make(chan error, 1)}
	opts := &gust.DialOptions{}
	opts.Options.Compression.Enabled = c.compress
	conn, _, err := gust.Dial(context.Background(), "ws://"+c.addr+"/", h, opts)
	if err != nil {
		return 0, err
	}
	go conn.ReadLoop()
	if conn.Compressed() != c.compress {
		return 0, fmt.Errorf("compression negotiated: %v", conn.Compressed())
	}
	n, err := conn.WriteFrom(gust.OpBinary, src)
	if err != nil {
		return n, err
	}
	select {
	case a := <-h.answer:
		err = checkAnswer(a, n)
	case err = <-h.closed:
		return n, fmt.Errorf("closed before the answer: %w", err)
	}
	conn.Close(gust.StatusNormalClosure, "")
	<-h.closed
	return n, err
}

type gustServer struct {
	gust.BuiltinEventHandler
	dst     io.Writer
	started func()
	done    chan error
	n       int64
}

func (h *gustServer) OnOpen(*gust.Conn) { h.started() }

func (h *gustServer) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	n, err := io.Copy(h.dst, m)
	h.n = n
	if err == nil {
		err = c.WriteString(fmt.Sprintf("ok %d", n))
	}
	h.done <- err
}

func gustReceive(c config, dst io.Writer, started func()) (int64, error) {
	h := &gustServer{dst: dst, started: started, done: make(chan error, 1)}
	s := &gust.Server{}
	s.Upgrader.Handler = h
	s.Upgrader.Options = gust.Options{StreamThreshold: 64 << 10, MaxMessageSize: -1}
	s.Upgrader.Options.Compression.Enabled = c.compress
	ln, err := listen(c.addr)
	if err != nil {
		return 0, err
	}
	go s.Serve(ln)
	err = <-h.done
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	s.Shutdown(ctx) // waits for the sender's close
	return h.n, err
}
