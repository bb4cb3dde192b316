package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
)

// The client side: a minimal RFC 6455 client (masked frames out, frames in,
// no extensions) over an HTTP/1.1 Upgrade on a TLS connection of its own,
// or over an RFC 8441 extended CONNECT stream of a shared HTTP/2
// connection (Go's HTTP/2 client, reached through http.Transport's
// TLSNextProto["h2"]: http.Transport itself refuses the :protocol
// pseudo-header).

var clientTLS = &tls.Config{InsecureSkipVerify: true} // the server's self-signed certificate, on loopback

// wsConn is one client WebSocket.
type wsConn struct {
	w     io.Writer
	r     *bufio.Reader
	key   [4]byte
	wbuf  []byte
	rbuf  []byte
	close func() // releases the TCP connection or the HTTP/2 stream
}

func newWSConn(w io.Writer, r *bufio.Reader, close func()) *wsConn {
	c := &wsConn{w: w, r: r, close: close}
	rand.Read(c.key[:])
	return c
}

// dialH1 opens a WebSocket with an HTTP/1.1 Upgrade on a new TLS connection.
func dialH1(ctx context.Context, addr string) (*wsConn, error) {
	cfg := clientTLS.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	d := tls.Dialer{Config: cfg}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	var k [16]byte
	rand.Read(k[:])
	key := base64.StdEncoding.EncodeToString(k[:])
	if _, err := fmt.Fprintf(nc, "GET / HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", addr, key); err != nil {
		nc.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(nc, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		nc.Close()
		return nil, err
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if resp.StatusCode != http.StatusSwitchingProtocols ||
		resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		nc.Close()
		return nil, fmt.Errorf("HTTP/1.1 upgrade: %s", resp.Status)
	}
	return newWSConn(nc, br, func() { stop(); nc.Close() }), nil
}

// h2Client is one HTTP/2 connection that WebSockets are opened on.
type h2Client struct {
	rt   http.RoundTripper
	tc   *tls.Conn
	addr string
}

func dialH2(ctx context.Context, addr string) (*h2Client, error) {
	tr := &http.Transport{TLSClientConfig: clientTLS, ForceAttemptHTTP2: true}
	tr.CloseIdleConnections() // sets TLSNextProto up
	next := tr.TLSNextProto["h2"]
	if next == nil {
		return nil, errors.New("net/http's transport offers no HTTP/2")
	}
	cfg := clientTLS.Clone()
	cfg.NextProtos = []string{"h2"}
	d := tls.Dialer{Config: cfg}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := nc.(*tls.Conn)
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		tc.Close()
		return nil, fmt.Errorf("ALPN: the server chose %q, not h2", p)
	}
	return &h2Client{rt: next(addr, tc), tc: tc, addr: addr}, nil
}

// open opens a WebSocket as an extended CONNECT stream (RFC 8441).
func (h *h2Client) open(ctx context.Context) (*wsConn, error) {
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodConnect, "https://"+h.addr+"/", pr)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set(":protocol", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	resp, err := h.rt.RoundTrip(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("extended CONNECT: %s %s", resp.Proto, resp.Status)
	}
	return newWSConn(pw, bufio.NewReaderSize(resp.Body, 4096), func() {
		pw.Close()
		cancel()
		resp.Body.Close()
	}), nil
}

func (h *h2Client) Close() { h.tc.Close() }

// writeFrame sends one masked frame in one write.
func (c *wsConn) writeFrame(op byte, p []byte) error {
	b := append(c.wbuf[:0], 0x80|op)
	switch n := len(p); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	b = append(b, c.key[:]...)
	for i, x := range p {
		b = append(b, x^c.key[i&3])
	}
	c.wbuf = b
	_, err := c.w.Write(b)
	return err
}

// readFrame returns the next frame; p is valid until the next call. The
// server sends no fragments to this client (no message is over its limits).
func (c *wsConn) readFrame() (op byte, p []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return 0, nil, err
	}
	if h[0]&0xf0 != 0x80 || h[1]&0x80 != 0 {
		return 0, nil, fmt.Errorf("unexpected frame header % x", h)
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(c.r, b[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(c.r, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 1<<20 {
		return 0, nil, fmt.Errorf("frame of %d bytes", n)
	}
	if uint64(cap(c.rbuf)) < n {
		c.rbuf = make([]byte, n)
	}
	p = c.rbuf[:n]
	_, err = io.ReadFull(c.r, p)
	return h[0] & 0x0f, p, err
}

// drainPing marks the end of a load run: the server answers it after every
// echo of the messages sent before it.
var drainPing = []byte("drain")

// load keeps window binary messages of size bytes in flight until stop is
// closed, checks every echo (sequence number in the first 8 bytes, the
// rest a fixed pattern) and adds it to echoed; then it sends a ping and
// returns once the pong, after the last echo, has arrived.
func (c *wsConn) load(window, size int, stop <-chan struct{}, echoed *atomic.Int64) error {
	tokens := make(chan struct{}, window)
	for range window {
		tokens <- struct{}{}
	}
	werr := make(chan error, 1)
	go func() {
		msg := make([]byte, size)
		for i := 8; i < size; i++ {
			msg[i] = byte(i)
		}
		for seq := uint64(0); ; seq++ {
			select {
			case <-stop:
				werr <- c.writeFrame(0x9, drainPing)
				return
			case <-tokens:
			}
			binary.BigEndian.PutUint64(msg, seq)
			if err := c.writeFrame(0x2, msg); err != nil {
				werr <- err
				return
			}
		}
	}()
	for expect := uint64(0); ; {
		op, p, err := c.readFrame()
		if err != nil {
			return fmt.Errorf("after %d echoes: %w", expect, err)
		}
		switch op {
		case 0xA: // the pong of drainPing: every echo is in
			if string(p) != string(drainPing) {
				return fmt.Errorf("unexpected pong %q", p)
			}
			return <-werr
		case 0x2:
			if len(p) != size || binary.BigEndian.Uint64(p) != expect {
				return fmt.Errorf("echo %d: %d bytes, sequence %d", expect, len(p), binary.BigEndian.Uint64(p))
			}
			for i := 8; i < size; i++ {
				if p[i] != byte(i) {
					return fmt.Errorf("echo %d: byte %d corrupted", expect, i)
				}
			}
			expect++
			echoed.Add(1)
			tokens <- struct{}{}
		default:
			return fmt.Errorf("unexpected frame, opcode %d", op)
		}
	}
}

// closeHandshake sends a close frame with 1000 and waits for the server's.
func (c *wsConn) closeHandshake() error {
	defer c.close()
	if err := c.writeFrame(0x8, []byte{0x03, 0xe8}); err != nil {
		return err
	}
	for {
		op, p, err := c.readFrame()
		if err != nil {
			return err
		}
		if op == 0x8 {
			if len(p) < 2 || binary.BigEndian.Uint16(p) != 1000 {
				return fmt.Errorf("close answered with % x", p)
			}
			return nil
		}
	}
}
