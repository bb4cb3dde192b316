package servers

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// The raw references answer the HTTP upgrade minimally (enough for gustload and any client
// that sends a key), then move bytes:
//
//   raw-copy    io.Copy between the socket and itself: the kernel splices, no user-space copy.
//               It echoes the client's masked frames as they are (gustload -allow-masked).
//   raw-buf     a read/write loop with a 64 KiB buffer: the floor for anything that must look at
//               the bytes. Also echoes masked frames as they are.
//   raw-record  parses each client frame, unmasks it and writes one unmasked server frame per
//               message, one write syscall per message: the one-write-per-message limit that
//               every peer library sits at.

func init() {
	register("raw-copy", "raw TCP after a minimal handshake: io.Copy on the *net.TCPConn (splice); echoes masked frames", func(a string) (Server, error) {
		return serveRaw(a, rawCopy)
	})
	register("raw-buf", "raw TCP after a minimal handshake: read/write loop with a 64 KiB buffer; echoes masked frames", func(a string) (Server, error) {
		return serveRaw(a, rawBuf)
	})
	register("raw-record", "raw TCP: parses each frame, unmasks, one write syscall per echoed message", func(a string) (Server, error) {
		return serveRaw(a, rawRecord)
	})
}

type rawServer struct {
	ln net.Listener
}

func serveRaw(addr string, echo func(c *net.TCPConn, br *bufio.Reader) error) (Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &rawServer{ln: ln}
	go func() {
		var delay time.Duration
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				// Out of descriptors or similar: back off like net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			delay = 0
			go func() {
				defer c.Close()
				tc := c.(*net.TCPConn)
				br := bufio.NewReaderSize(tc, 64<<10)
				if err := rawHandshake(tc, br); err != nil {
					return
				}
				_ = echo(tc, br)
			}()
		}
	}()
	return s, nil
}

func (s *rawServer) Addr() string { return s.ln.Addr().String() }
func (s *rawServer) Close() error { return s.ln.Close() }

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// rawHandshake reads an HTTP/1.1 upgrade request and answers 101 with the accept key. It checks
// only what it needs: a GET and a Sec-WebSocket-Key.
func rawHandshake(c net.Conn, br *bufio.Reader) error {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	line, err := br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(line), "GET ") {
		return fmt.Errorf("not a GET: %q", line)
	}
	key := ""
	for n := 0; ; n++ {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if n > 100 {
			return errors.New("too many header lines")
		}
		s := strings.TrimRight(string(line), "\r\n")
		if s == "" {
			break
		}
		name, value, ok := strings.Cut(s, ":")
		if ok && strings.EqualFold(strings.TrimSpace(name), "Sec-WebSocket-Key") {
			key = strings.TrimSpace(value)
		}
	}
	if key == "" {
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return errors.New("no Sec-WebSocket-Key")
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	_, err = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+
		base64.StdEncoding.EncodeToString(sum[:])+"\r\n\r\n")
	return err
}

// flushBuffered writes back what the handshake reader already holds past the request.
func flushBuffered(c *net.TCPConn, br *bufio.Reader) error {
	if n := br.Buffered(); n > 0 {
		p, _ := br.Peek(n)
		if _, err := c.Write(p); err != nil {
			return err
		}
		_, _ = br.Discard(n)
	}
	return nil
}

func rawCopy(c *net.TCPConn, br *bufio.Reader) error {
	if err := flushBuffered(c, br); err != nil {
		return err
	}
	_, err := io.Copy(c, c) // *TCPConn.ReadFrom(*TCPConn): splice(2) through a pipe
	return err
}

func rawBuf(c *net.TCPConn, br *bufio.Reader) error {
	if err := flushBuffered(c, br); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
	}
}

// rawRecord echoes message by message: one unmasked frame and one write per message.
// Fragmented messages are reassembled; a ping gets a pong; a close gets a close.
func rawRecord(c *net.TCPConn, br *bufio.Reader) error {
	var (
		hdr   [14]byte
		out   []byte // header room + message payload
		msgOp byte
		inMsg bool
	)
	for {
		if _, err := io.ReadFull(br, hdr[:2]); err != nil {
			return err
		}
		fin := hdr[0]&0x80 != 0
		op := hdr[0] & 0x0f
		masked := hdr[1]&0x80 != 0
		n := uint64(hdr[1] & 0x7f)
		switch n {
		case 126:
			if _, err := io.ReadFull(br, hdr[2:4]); err != nil {
				return err
			}
			n = uint64(hdr[2])<<8 | uint64(hdr[3])
		case 127:
			if _, err := io.ReadFull(br, hdr[2:10]); err != nil {
				return err
			}
			n = 0
			for _, b := range hdr[2:10] {
				n = n<<8 | uint64(b)
			}
		}
		if n > MaxMessage || uint64(len(out))+n > MaxMessage+14 {
			return errors.New("message too big")
		}
		var key [4]byte
		if masked {
			if _, err := io.ReadFull(br, key[:]); err != nil {
				return err
			}
		}
		if op >= 8 { // control frame: answer at once, outside any message being assembled
			p := make([]byte, 2+n)
			if _, err := io.ReadFull(br, p[2:]); err != nil {
				return err
			}
			unmask(p[2:], key)
			switch op {
			case 0x9: // ping -> pong
				p[0], p[1] = 0x8a, byte(n)
				if _, err := c.Write(p); err != nil {
					return err
				}
			case 0x8: // close -> close back, then done
				p[0], p[1] = 0x88, byte(n)
				_, _ = c.Write(p)
				return nil
			}
			continue
		}
		if !inMsg {
			msgOp, inMsg = op, true
			out = append(out[:0], make([]byte, 10)...) // header room, filled in below
		}
		start := len(out)
		out = append(out, make([]byte, n)...)
		if _, err := io.ReadFull(br, out[start:]); err != nil {
			return err
		}
		unmask(out[start:], key)
		if !fin {
			continue
		}
		inMsg = false
		payload := len(out) - 10
		h := 10 - headerLen(payload)
		putHeader(out[h:10], msgOp, payload)
		if _, err := c.Write(out[h:]); err != nil {
			return err
		}
	}
}

func headerLen(n int) int {
	switch {
	case n < 126:
		return 2
	case n < 1<<16:
		return 4
	default:
		return 10
	}
}

// putHeader writes a final, unmasked frame header of len(dst) bytes for an n-byte payload.
func putHeader(dst []byte, op byte, n int) {
	dst[0] = 0x80 | op
	switch len(dst) {
	case 2:
		dst[1] = byte(n)
	case 4:
		dst[1] = 126
		dst[2], dst[3] = byte(n>>8), byte(n)
	default:
		dst[1] = 127
		for i := 0; i < 8; i++ {
			dst[2+i] = byte(uint64(n) >> (56 - 8*i))
		}
	}
}

// unmask XORs p with the masking key, eight bytes at a time.
func unmask(p []byte, key [4]byte) {
	k := uint64(binary.LittleEndian.Uint32(key[:]))
	k |= k << 32
	i := 0
	for ; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], binary.LittleEndian.Uint64(p[i:])^k)
	}
	for ; i < len(p); i++ {
		p[i] ^= key[i&3]
	}
}
