package load

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// testServer is a tiny WebSocket echo server written for these tests with net and its own
// framing (no library), with faults to inject.
type testServer struct {
	CorruptMsg  int  // 1-based index of a message (per connection) whose echo gets one byte flipped
	DropMsg     int  // 1-based index of a message that is not echoed
	CloseAfter  int  // close the TCP connection after echoing this many messages
	Fragment    bool // echo each message as two frames (text/binary + continuation)
	MaskedEcho  bool // echo the client's frames with their mask, as raw-copy does
	BadAccept   bool // answer the handshake with a wrong Sec-WebSocket-Accept
	Push        int  // after the handshake, send this many 100-byte text messages and wait
	PingFirst   bool // send a ping before echoing, expect the client to answer
	ServerClose bool // send a close frame after echoing CloseAfter messages instead of a bare close
	HangUp      bool // close the connection right after the handshake

	ln net.Listener
	wg sync.WaitGroup
}

func (s *testServer) start(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.ln = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				_ = s.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return ln.Addr().String()
}

func (s *testServer) serve(c net.Conn) error {
	br := bufio.NewReader(c)
	key := ""
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		if name, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(name, "Sec-WebSocket-Key") {
			key = strings.TrimSpace(v)
		}
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	accept := base64.StdEncoding.EncodeToString(sum[:])
	if s.BadAccept {
		accept = "AAAA" + accept[4:]
	}
	if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+accept+"\r\n\r\n"); err != nil {
		return err
	}
	if s.HangUp {
		return nil
	}
	if s.Push > 0 {
		msg := []byte(strings.Repeat("p", 100))
		for i := 0; i < s.Push; i++ {
			if _, err := c.Write(appendHeader(nil, opText, len(msg), false, [4]byte{})); err != nil {
				return err
			}
			if _, err := c.Write(msg); err != nil {
				return err
			}
		}
	}
	if s.PingFirst {
		if _, err := c.Write([]byte{0x89, 2, 'h', 'i'}); err != nil {
			return err
		}
	}
	n := 0
	for {
		var h [2]byte
		if _, err := io.ReadFull(br, h[:]); err != nil {
			return err
		}
		op := h[0] & 0x0f
		size := uint64(h[1] & 0x7f)
		ext := []byte{}
		switch size {
		case 126:
			ext = make([]byte, 2)
		case 127:
			ext = make([]byte, 8)
		}
		if _, err := io.ReadFull(br, ext); err != nil {
			return err
		}
		switch len(ext) {
		case 2:
			size = uint64(binary.BigEndian.Uint16(ext))
		case 8:
			size = binary.BigEndian.Uint64(ext)
		}
		var key [4]byte
		if _, err := io.ReadFull(br, key[:]); err != nil {
			return err
		}
		p := make([]byte, size)
		if _, err := io.ReadFull(br, p); err != nil {
			return err
		}
		if s.MaskedEcho {
			frame := append(append(append([]byte{h[0], h[1]}, ext...), key[:]...), p...)
			if _, err := c.Write(frame); err != nil {
				return err
			}
			if op == opClose {
				return nil
			}
			continue
		}
		maskBytes(key, 0, p)
		switch op {
		case opClose:
			_, _ = c.Write(append(appendHeader(nil, opClose, len(p), false, key), p...))
			return nil
		case opPong:
			continue
		}
		n++
		if n == s.DropMsg {
			continue
		}
		if n == s.CorruptMsg {
			p[len(p)/2] ^= 0x01
		}
		var out []byte
		if s.Fragment && len(p) > 1 {
			half := len(p) / 2
			out = appendHeader(out, op, half, false, key)
			out[0] &^= 0x80 // not final
			out = append(out, p[:half]...)
			out = appendHeader(out, opContinuation, len(p)-half, false, key)
			out = append(out, p[half:]...)
		} else {
			out = append(appendHeader(nil, op, len(p), false, key), p...)
		}
		if _, err := c.Write(out); err != nil {
			return err
		}
		if s.CloseAfter > 0 && n >= s.CloseAfter {
			if s.ServerClose {
				_, _ = c.Write([]byte{0x88, 2, 0x03, 0xe9}) // 1001 going away
				time.Sleep(50 * time.Millisecond)
			}
			return errors.New("closing as told")
		}
	}
}
