package load

import (
	"bufio"
	"bytes"
	"compress/flate"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	PushSeq     bool // start each pushed message with its number, 1 to Push, written in two pieces
	PushSkip    int  // with PushSeq, leave out the message with this number
	PingFirst   bool // send a ping before echoing, expect the client to answer
	ServerClose bool // send a close frame after echoing CloseAfter messages instead of a bare close
	HangUp      bool // close the connection right after the handshake

	// permessage-deflate, done with compress/flate: the server accepts an offer, inflates
	// compressed messages (with the client's context unless client_no_context_takeover, and a
	// window of exactly 2^ClientBits bytes, so that a client reaching further back fails) and
	// compresses its echoes (keeping its context unless server_no_context_takeover).
	Deflate          bool
	DeflateResponse  string // the Sec-WebSocket-Extensions answer; derived from the offer when empty
	ClientBits       int    // client_max_window_bits to answer (0: none)
	PlainEvery       int    // send every n-th echo uncompressed
	FinalBlock       bool   // end every compressed echo with a final block (BFINAL) instead of a sync flush
	CorruptDeflated  int    // 1-based index of an echo whose compressed payload gets one byte flipped
	NeedCompressed   bool   // fail if a message from the client arrives without RSV1
	sawUncompressed  atomic.Int64
	sawCompressedMsg atomic.Int64

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
	key, offer := "", ""
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
		} else if ok && strings.EqualFold(name, "Sec-WebSocket-Extensions") {
			offer = strings.TrimSpace(v)
		}
	}
	var z *testDeflate
	extHeader := ""
	if s.Deflate && strings.Contains(offer, "permessage-deflate") {
		z = &testDeflate{
			serverNoCtx: strings.Contains(offer, "server_no_context_takeover"),
			clientNoCtx: strings.Contains(offer, "client_no_context_takeover"),
			clientBits:  15,
		}
		resp := s.DeflateResponse
		if resp == "" {
			resp = "permessage-deflate"
			if z.serverNoCtx {
				resp += "; server_no_context_takeover"
			}
			if z.clientNoCtx {
				resp += "; client_no_context_takeover"
			}
			if s.ClientBits > 0 {
				resp += "; client_max_window_bits=" + strconv.Itoa(s.ClientBits)
				z.clientBits = s.ClientBits
			}
		}
		extHeader = "Sec-WebSocket-Extensions: " + resp + "\r\n"
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	accept := base64.StdEncoding.EncodeToString(sum[:])
	if s.BadAccept {
		accept = "AAAA" + accept[4:]
	}
	if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+accept+"\r\n"+extHeader+"\r\n"); err != nil {
		return err
	}
	if s.HangUp {
		return nil
	}
	if s.Push > 0 {
		msg := []byte(strings.Repeat("p", 100))
		for i := 0; i < s.Push; i++ {
			if s.PushSeq && i+1 == s.PushSkip {
				continue
			}
			if s.PushSeq {
				copy(msg, fmt.Sprintf("%d ", i+1))
			}
			if _, err := c.Write(appendHeader(nil, opText, len(msg), false, [4]byte{})); err != nil {
				return err
			}
			// The number in two pieces: the reader must resume it.
			if _, err := c.Write(msg[:1]); err != nil {
				return err
			}
			if _, err := c.Write(msg[1:]); err != nil {
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
		compressed := h[0]&rsv1 != 0
		if compressed && z == nil {
			return errors.New("RSV1 without permessage-deflate")
		}
		if op == opText || op == opBinary {
			if compressed {
				s.sawCompressedMsg.Add(1)
				var err error
				if p, err = z.inflate(p); err != nil {
					_, _ = c.Write([]byte{0x88, 2, 0x03, 0xef}) // 1007
					return err
				}
			} else if z != nil {
				s.sawUncompressed.Add(1)
				if s.NeedCompressed {
					return errors.New("an uncompressed message")
				}
			}
		}
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
		var rsv byte
		if z != nil && (s.PlainEvery == 0 || n%s.PlainEvery != 0) {
			var err error
			if p, err = z.deflate(p, s.FinalBlock); err != nil {
				return err
			}
			rsv = rsv1
			if n == s.CorruptDeflated {
				p[len(p)/2] ^= 0x10
			}
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
		out[0] |= rsv // the first frame only
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

// testDeflate is the test server's permessage-deflate, with compress/flate and the simplest
// code that is right: a window kept by hand each way.
type testDeflate struct {
	serverNoCtx, clientNoCtx bool
	clientBits               int
	readWin, writeWin        []byte
}

func (z *testDeflate) inflate(p []byte) ([]byte, error) {
	var dict []byte
	if !z.clientNoCtx {
		dict = z.readWin
	}
	src := append(append([]byte(nil), p...), finalTail...)
	fr := flate.NewReaderDict(bytes.NewReader(src), dict)
	out, err := io.ReadAll(fr)
	if err != nil {
		return nil, fmt.Errorf("inflate: %w", err)
	}
	if !z.clientNoCtx {
		z.readWin = lastN(append(z.readWin, out...), 1<<z.clientBits)
	}
	return out, nil
}

func (z *testDeflate) deflate(p []byte, final bool) ([]byte, error) {
	var dict []byte
	if !z.serverNoCtx {
		dict = z.writeWin
	}
	var b bytes.Buffer
	fw, err := flate.NewWriterDict(&b, flate.DefaultCompression, dict)
	if err != nil {
		return nil, err
	}
	if _, err := fw.Write(p); err != nil {
		return nil, err
	}
	if final {
		err = fw.Close()
	} else {
		err = fw.Flush()
	}
	if err != nil {
		return nil, err
	}
	out := b.Bytes()
	if !final {
		if !bytes.HasSuffix(out, syncTail) {
			return nil, errors.New("no sync tail")
		}
		out = out[:len(out)-4]
	}
	if !z.serverNoCtx {
		z.writeWin = lastN(append(z.writeWin, p...), 1<<15)
	}
	return out, nil
}

func lastN(b []byte, n int) []byte {
	if len(b) > n {
		return append([]byte(nil), b[len(b)-n:]...)
	}
	return b
}

// finalTail ends a message's deflate data for a one-shot inflate: the sync tail, then an empty
// final block.
var finalTail = []byte{0x00, 0x00, 0xff, 0xff, 0x01, 0x00, 0x00, 0xff, 0xff}
