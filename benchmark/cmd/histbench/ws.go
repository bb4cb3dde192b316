package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The WebSocket client here speaks just what the chat needs: an upgrade
// written by hand (so that a member that never reads can send it and stop
// there), unmasked server frames in, masked text frames out, no
// extensions. It stays apart from gust so that both builds are measured
// with the same client.

const (
	opContinuation = 0x0
	opText         = 0x1
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA

	maxPayload = 1 << 20 // more than the chat ever sends in one message
)

// wsPath is the chat's WebSocket path for a member.
func wsPath(name, room, since string) string {
	v := url.Values{"name": {name}, "room": {room}, "since": {since}}
	return "/ws?" + v.Encode()
}

// upgradeRequest is the HTTP request that opens a WebSocket on path, with
// key as its Sec-WebSocket-Key.
func upgradeRequest(host, path, key string) []byte {
	return []byte("GET " + path + " HTTP/1.1\r\n" +
		"Host: " + host + "\r\n" +
		"Upgrade: websocket\r\n" +
		"Connection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + key + "\r\n" +
		"Sec-WebSocket-Version: 13\r\n\r\n")
}

func newKey() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// dialSilent opens a TCP connection to addr with a receive buffer of
// rcvbuf bytes (set before connecting, so the window it announces is
// small too), writes the upgrade request for path and returns: nothing is
// ever read from it.
func dialSilent(ctx context.Context, addr, path string, rcvbuf int) (net.Conn, error) {
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
		})
		return errors.Join(err, serr)
	}}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := nc.Write(upgradeRequest(addr, path, newKey())); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// wsConn is an open WebSocket. One goroutine reads (next); writes may come
// from any.
type wsConn struct {
	nc  net.Conn
	br  *bufio.Reader
	buf []byte // the last message read

	wmu  sync.Mutex
	wbuf []byte
}

// dialWS opens a WebSocket to the chat at addr, path as wsPath makes it.
func dialWS(ctx context.Context, addr, path string) (*wsConn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	} else {
		nc.SetDeadline(time.Now().Add(30 * time.Second))
	}
	key := newKey()
	if _, err := nc.Write(upgradeRequest(addr, path, key)); err != nil {
		nc.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(nc, 16<<10)
	tp := textproto.NewReader(br)
	status, err := tp.ReadLine()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("reading the upgrade response: %w", err)
	}
	if !strings.HasPrefix(status, "HTTP/1.1 101 ") {
		nc.Close()
		return nil, fmt.Errorf("upgrade refused: %q", status)
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("reading the upgrade response: %w", err)
	}
	if got := hdr.Get("Sec-WebSocket-Accept"); got != acceptKey(key) {
		nc.Close()
		return nil, fmt.Errorf("wrong Sec-WebSocket-Accept %q", got)
	}
	if ext := hdr.Get("Sec-WebSocket-Extensions"); ext != "" {
		nc.Close()
		return nil, fmt.Errorf("an extension not asked for: %q", ext)
	}
	nc.SetDeadline(time.Time{})
	return &wsConn{nc: nc, br: br}, nil
}

// errClosed is what next returns once the server has sent a close frame.
type errClosed struct{ code uint16 }

func (e errClosed) Error() string { return fmt.Sprintf("closed by the server (%d)", e.code) }

// next returns the next data message, valid until the following call. It
// answers pings, and a close frame with a close frame.
func (c *wsConn) next() (op byte, p []byte, err error) {
	c.buf = c.buf[:0]
	var msgOp byte
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(c.br, hdr[:2]); err != nil {
			return 0, nil, err
		}
		fin, op := hdr[0]&0x80 != 0, hdr[0]&0x0f
		if hdr[1]&0x80 != 0 {
			return 0, nil, errors.New("a masked frame from the server")
		}
		n := uint64(hdr[1] & 0x7f)
		switch n {
		case 126:
			if _, err := io.ReadFull(c.br, hdr[:2]); err != nil {
				return 0, nil, err
			}
			n = uint64(binary.BigEndian.Uint16(hdr[:2]))
		case 127:
			if _, err := io.ReadFull(c.br, hdr[:8]); err != nil {
				return 0, nil, err
			}
			n = binary.BigEndian.Uint64(hdr[:8])
		}
		if n > maxPayload || uint64(len(c.buf))+n > maxPayload {
			return 0, nil, fmt.Errorf("a message of more than %d bytes", maxPayload)
		}
		if op >= opClose {
			var ctl [125]byte
			if n > 125 {
				return 0, nil, errors.New("a control frame of more than 125 bytes")
			}
			if _, err := io.ReadFull(c.br, ctl[:n]); err != nil {
				return 0, nil, err
			}
			switch op {
			case opPing:
				if err := c.write(opPong, ctl[:n]); err != nil {
					return 0, nil, err
				}
			case opClose:
				var code uint16 = 1005
				if n >= 2 {
					code = binary.BigEndian.Uint16(ctl[:2])
				}
				c.write(opClose, ctl[:min(n, 2)])
				return 0, nil, errClosed{code}
			}
			continue
		}
		start := len(c.buf)
		c.buf = slices.Grow(c.buf, int(n))[:start+int(n)]
		if _, err := io.ReadFull(c.br, c.buf[start:]); err != nil {
			return 0, nil, err
		}
		if op != opContinuation {
			msgOp = op
		}
		if fin {
			return msgOp, c.buf, nil
		}
	}
}

// write sends one masked frame.
func (c *wsConn) write(op byte, p []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b := append(c.wbuf[:0], 0x80|op)
	switch n := len(p); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	var mask [4]byte
	rand.Read(mask[:])
	b = append(b, mask[:]...)
	start := len(b)
	b = append(b, p...)
	for i := range p {
		b[start+i] ^= mask[i&3]
	}
	c.wbuf = b
	_, err := c.nc.Write(b)
	return err
}

func (c *wsConn) writeText(p []byte) error { return c.write(opText, p) }

// close says goodbye (1000) and closes the connection without waiting for
// the answer.
func (c *wsConn) close() {
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	c.write(opClose, []byte{0x03, 0xe8})
	c.nc.Close()
}
