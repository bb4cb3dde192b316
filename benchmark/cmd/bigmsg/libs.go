package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	coder "github.com/coder/websocket"
	"github.com/gorilla/websocket"

	"github.com/gustws/gust"
)

// A sender dials c.addr and sends src as one binary message, waits for the
// receiver's "ok N" and returns the bytes sent.
var senders = map[string]func(c config, src io.Reader) (int64, error){
	"gust":    gustSend,
	"gorilla": gorillaSend,
	"coder":   coderSend,
}

// A receiver accepts one connection on c.addr, calls started, copies one
// message into dst, answers "ok N" and returns N.
var receivers = map[string]func(c config, dst io.Writer, started func()) (int64, error){
	"gust":    gustReceive,
	"gorilla": gorillaReceive,
	"coder":   coderReceive,
}

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

// --- gust ---

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
	s.Handler = h
	s.Options = gust.Options{StreamThreshold: 64 << 10, MaxMessageSize: -1}
	s.Options.Compression.Enabled = c.compress
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

// --- gorilla ---

func gorillaSend(c config, src io.Reader) (int64, error) {
	d := websocket.Dialer{EnableCompression: c.compress}
	conn, _, err := d.Dial("ws://"+c.addr+"/", nil)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	w, err := conn.NextWriter(websocket.BinaryMessage)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(w, src)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, err
	}
	_, answer, err := conn.ReadMessage()
	if err != nil {
		return n, err
	}
	conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	return n, checkAnswer(string(answer), n)
}

func gorillaReceive(c config, dst io.Writer, started func()) (int64, error) {
	type outcome struct {
		n   int64
		err error
	}
	done := make(chan outcome, 1)
	u := websocket.Upgrader{EnableCompression: c.compress}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := u.Upgrade(w, r, nil)
		if err != nil {
			done <- outcome{err: err}
			return
		}
		defer conn.Close()
		started()
		_, rd, err := conn.NextReader()
		if err != nil {
			done <- outcome{err: err}
			return
		}
		n, err := io.Copy(dst, rd)
		if err == nil {
			err = conn.WriteMessage(websocket.TextMessage, []byte(fmt.Sprintf("ok %d", n)))
		}
		if err == nil {
			conn.ReadMessage() // the sender's close
		}
		done <- outcome{n, err}
	})}
	ln, err := listen(c.addr)
	if err != nil {
		return 0, err
	}
	go srv.Serve(ln)
	o := <-done
	srv.Close()
	return o.n, o.err
}

// --- coder ---

func coderMode(compress bool) coder.CompressionMode {
	if compress {
		return coder.CompressionContextTakeover
	}
	return coder.CompressionDisabled
}

func coderSend(c config, src io.Reader) (int64, error) {
	ctx := context.Background()
	conn, _, err := coder.Dial(ctx, "ws://"+c.addr+"/", &coder.DialOptions{CompressionMode: coderMode(c.compress)})
	if err != nil {
		return 0, err
	}
	defer conn.CloseNow()
	w, err := conn.Writer(ctx, coder.MessageBinary)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(w, src)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, err
	}
	_, answer, err := conn.Read(ctx)
	if err != nil {
		return n, err
	}
	conn.Close(coder.StatusNormalClosure, "")
	return n, checkAnswer(string(answer), n)
}

func coderReceive(c config, dst io.Writer, started func()) (int64, error) {
	type outcome struct {
		n   int64
		err error
	}
	done := make(chan outcome, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := coder.Accept(w, r, &coder.AcceptOptions{CompressionMode: coderMode(c.compress)})
		if err != nil {
			done <- outcome{err: err}
			return
		}
		defer conn.CloseNow()
		conn.SetReadLimit(-1)
		started()
		ctx := r.Context()
		_, rd, err := conn.Reader(ctx)
		if err != nil {
			done <- outcome{err: err}
			return
		}
		n, err := io.Copy(dst, rd)
		if err == nil {
			err = conn.Write(ctx, coder.MessageText, []byte(fmt.Sprintf("ok %d", n)))
		}
		if err == nil {
			_, _, err = conn.Read(ctx) // the sender's close
			var ce coder.CloseError
			if errors.As(err, &ce) || strings.Contains(fmt.Sprint(err), "EOF") {
				err = nil
			}
		}
		done <- outcome{n, err}
	})}
	ln, err := listen(c.addr)
	if err != nil {
		return 0, err
	}
	go srv.Serve(ln)
	o := <-done
	srv.Close()
	return o.n, o.err
}
