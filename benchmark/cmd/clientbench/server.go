package main

// The server every client talks to: raw RFC 6455 over a *net.TCPConn, written for this benchmark,
// so that it shares no code with any of the three clients and treats them all alike. It is driven
// by small text commands from the client:
//
//	"load"   the next data message is the payload of the following runs (its type included);
//	         answered with "ok"
//	"out N"  answered with "go"; then N data messages are read, each checked against the
//	         payload: type, length, and every byte of the first and the last; answered with
//	         "done N" (or "error: ..." on a mismatch, after which the connection is closed)
//	"in N"   N messages of the payload are sent back to back, as unmasked frames, as many as
//	         fit in 64 KiB per write system call
//
// Fragmented messages are accepted (gorilla's client sends a large message as 4 KiB frames). A
// close frame is answered and ends the connection. Compression is never negotiated.

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

const (
	serverReadBuffer = 256 << 10 // big enough that the server's reads never pace a client
	serverWriteChunk = 64 << 10  // "in": frames per write system call, up to this many bytes
	maxPayload       = 16 << 20
)

// serve accepts connections until ln is closed.
func serve(ln net.Listener, logf func(string, ...any)) error {
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() {
			if err := serveConn(nc); err != nil && logf != nil {
				logf("clientbench server: %v: %v", nc.RemoteAddr(), err)
			}
		}()
	}
}

type srvConn struct {
	nc net.Conn
	br *bufio.Reader

	op      byte   // the payload's opcode (1 text, 2 binary)
	payload []byte // the payload of "out" and "in"
	chunk   []byte // payload frames, back to back, for "in"
	perChk  int    // frames in chunk

	msg []byte // the message being assembled (for checks and commands)
}

func serveConn(nc net.Conn) error {
	defer nc.Close()
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	s := &srvConn{nc: nc, br: bufio.NewReaderSize(nc, serverReadBuffer)}
	if err := s.handshake(); err != nil {
		return err
	}
	for {
		op, msg, err := s.readMessage(true)
		if err != nil {
			if errors.Is(err, errPeerClosed) {
				return nil
			}
			return err
		}
		if op != 1 {
			return s.fail(fmt.Errorf("expected a command, got a message of opcode %d", op))
		}
		cmd, arg, _ := strings.Cut(string(msg), " ")
		switch cmd {
		case "load":
			op, p, err := s.readMessage(true)
			if err != nil {
				return err
			}
			s.setPayload(op, p)
			if err := s.writeText("ok"); err != nil {
				return err
			}
		case "out":
			n, err := strconv.Atoi(arg)
			if err != nil || n < 1 || s.payload == nil {
				return s.fail(fmt.Errorf("bad command %q", msg))
			}
			if err := s.writeText("go"); err != nil {
				return err
			}
			if err := s.receive(n); err != nil {
				return s.fail(err)
			}
			if err := s.writeText("done " + arg); err != nil {
				return err
			}
		case "in":
			n, err := strconv.Atoi(arg)
			if err != nil || n < 1 || s.payload == nil {
				return s.fail(fmt.Errorf("bad command %q", msg))
			}
			if err := s.send(n); err != nil {
				return err
			}
		default:
			return s.fail(fmt.Errorf("unknown command %q", msg))
		}
	}
}

var errPeerClosed = errors.New("peer closed")

// fail tells the client what went wrong, then ends the connection.
func (s *srvConn) fail(err error) error {
	s.writeText("error: " + err.Error())
	return err
}

func (s *srvConn) handshake() error {
	tp := textproto.NewReader(s.br)
	line, err := tp.ReadLine()
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "GET ") || !strings.HasSuffix(line, " HTTP/1.1") {
		return fmt.Errorf("bad request line %q", line)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return err
	}
	key := h.Get("Sec-Websocket-Key")
	if !headerHas(h, "Upgrade", "websocket") || !headerHas(h, "Connection", "upgrade") ||
		h.Get("Sec-Websocket-Version") != "13" || key == "" {
		io.WriteString(s.nc, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return errors.New("not a WebSocket handshake")
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	_, err = io.WriteString(s.nc, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Accept: "+base64.StdEncoding.EncodeToString(sum[:])+"\r\n\r\n")
	return err
}

// headerHas reports whether a comma-separated header lists token (case-insensitive).
func headerHas(h textproto.MIMEHeader, name, token string) bool {
	for _, v := range h[http.CanonicalHeaderKey(name)] {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func (s *srvConn) setPayload(op byte, p []byte) {
	s.op = op
	s.payload = append([]byte(nil), p...)
	frame := appendFrame(nil, op, s.payload)
	s.perChk = max(1, serverWriteChunk/len(frame))
	s.chunk = s.chunk[:0]
	for range s.perChk {
		s.chunk = append(s.chunk, frame...)
	}
}

// appendFrame appends one final, unmasked frame.
func appendFrame(b []byte, op byte, p []byte) []byte {
	b = append(b, 0x80|op)
	switch n := len(p); {
	case n <= 125:
		b = append(b, byte(n))
	case n <= 0xffff:
		b = append(b, 126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return append(b, p...)
}

func (s *srvConn) writeText(t string) error {
	_, err := s.nc.Write(appendFrame(nil, 1, []byte(t)))
	return err
}

// send writes n payload messages.
func (s *srvConn) send(n int) error {
	frameLen := len(s.chunk) / s.perChk
	for n > 0 {
		k := min(n, s.perChk)
		if _, err := s.nc.Write(s.chunk[:k*frameLen]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// receive reads n data messages and checks them against the payload: type and length of each,
// every byte of the first and the last.
func (s *srvConn) receive(n int) error {
	for i := range n {
		keep := i == 0 || i == n-1
		op, msg, err := s.readMessage(keep)
		if err != nil {
			return fmt.Errorf("message %d of %d: %w", i+1, n, err)
		}
		if op != s.op {
			return fmt.Errorf("message %d of %d: opcode %d, want %d", i+1, n, op, s.op)
		}
		if len(msg) != len(s.payload) {
			return fmt.Errorf("message %d of %d: %d bytes, want %d", i+1, n, len(msg), len(s.payload))
		}
		if keep && !bytes.Equal(msg, s.payload) {
			return fmt.Errorf("message %d of %d: content differs from the payload", i+1, n)
		}
	}
	return nil
}

// readMessage reads one data message, answering pings and a close frame on the way. With keep
// it returns the unmasked bytes; otherwise it skips them and returns a slice of the right length
// whose content is undefined.
func (s *srvConn) readMessage(keep bool) (byte, []byte, error) {
	var op byte
	s.msg = s.msg[:0]
	size := 0
	for {
		var hdr [14]byte
		if _, err := io.ReadFull(s.br, hdr[:2]); err != nil {
			return 0, nil, err
		}
		fin := hdr[0]&0x80 != 0
		fop := hdr[0] & 0x0f
		if hdr[0]&0x70 != 0 {
			return 0, nil, errors.New("reserved bits set (no extension was negotiated)")
		}
		if hdr[1]&0x80 == 0 {
			return 0, nil, errors.New("client frame not masked")
		}
		length := uint64(hdr[1] & 0x7f)
		switch length {
		case 126:
			if _, err := io.ReadFull(s.br, hdr[2:4]); err != nil {
				return 0, nil, err
			}
			length = uint64(binary.BigEndian.Uint16(hdr[2:4]))
		case 127:
			if _, err := io.ReadFull(s.br, hdr[2:10]); err != nil {
				return 0, nil, err
			}
			length = binary.BigEndian.Uint64(hdr[2:10])
		}
		if length > maxPayload || size+int(length) > maxPayload {
			return 0, nil, fmt.Errorf("message over %d bytes", maxPayload)
		}
		var key [4]byte
		if _, err := io.ReadFull(s.br, key[:]); err != nil {
			return 0, nil, err
		}
		n := int(length)

		if fop >= 8 { // control frame
			if !fin || n > 125 {
				return 0, nil, errors.New("bad control frame")
			}
			var p [125]byte
			if _, err := io.ReadFull(s.br, p[:n]); err != nil {
				return 0, nil, err
			}
			unmask(p[:n], key, 0)
			switch fop {
			case 8:
				s.nc.Write(appendFrame(nil, 8, p[:min(n, 2)]))
				return 0, nil, errPeerClosed
			case 9:
				if _, err := s.nc.Write(appendFrame(nil, 10, p[:n])); err != nil {
					return 0, nil, err
				}
			}
			continue
		}
		switch {
		case op == 0 && fop == 0:
			return 0, nil, errors.New("continuation frame without a message")
		case op == 0:
			op = fop
		case fop != 0:
			return 0, nil, errors.New("new message inside a fragmented message")
		}
		if keep {
			start := len(s.msg)
			s.msg = append(s.msg, make([]byte, n)...)
			if _, err := io.ReadFull(s.br, s.msg[start:]); err != nil {
				return 0, nil, err
			}
			unmask(s.msg[start:], key, 0)
		} else if _, err := s.br.Discard(n); err != nil {
			return 0, nil, err
		}
		size += n
		if fin {
			if !keep {
				if cap(s.msg) < size {
					s.msg = make([]byte, size)
				}
				s.msg = s.msg[:size]
			}
			return op, s.msg, nil
		}
	}
}

func unmask(b []byte, key [4]byte, pos int) {
	for i := range b {
		b[i] ^= key[(pos+i)&3]
	}
}
