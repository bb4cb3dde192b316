package load

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// wsConn is one client connection: a writer goroutine that keeps Window messages in flight and
// a reader goroutine that parses and verifies the echoes.
type wsConn struct {
	id  int
	r   *runner
	nc  net.Conn
	key [4]byte // masking key of every frame this connection sends

	wmu sync.Mutex // the writer, pongs and the close frame share the socket

	sent  atomic.Int64 // messages written
	acked atomic.Int64 // echoes received and verified (or messages received, in recv-only)
	// With Config.Seq: the sequence numbers of the first and the last message received, -1
	// before the first.
	seqFirst, seqLast atomic.Int64
	rxBytes           atomic.Int64 // payload bytes of the messages counted in acked
	wake              chan struct{}
	times             []atomic.Int64 // send time of message s at s % Window (ns since runner start)

	closing  atomic.Bool // we sent (or are about to send) a close frame
	ponged   atomic.Bool // the pong answering pingAll's ping came (Config.PingAtEnd)
	leftover []byte      // bytes read past the handshake response
	done     chan struct{}

	// permessage-deflate, when negotiated (Config.Deflate)
	defl      *deflater
	infl      *inflater
	deflateAt string       // the server's Sec-WebSocket-Extensions
	plain     []byte       // the message being compressed, with its sequence number
	zbuf      []byte       // its compressed payload
	txWire    atomic.Int64 // payload bytes written on the wire (compressed or not)
	txPlain   atomic.Int64 // payload bytes of the same messages before compression
	rxWire    atomic.Int64 // payload bytes of the echoes received, as on the wire
}

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// dial opens the TCP connection and runs the client handshake.
func (r *runner) dial(ctx context.Context, id int, src net.IP) (*wsConn, error) {
	d := net.Dialer{Timeout: r.cfg.ConnectTimeout, KeepAlive: r.cfg.KeepAlive}
	if src != nil {
		d.LocalAddr = &net.TCPAddr{IP: src}
		d.Control = BindNoPort
	}
	nc, err := d.DialContext(ctx, "tcp", r.target.host)
	if err != nil {
		return nil, err
	}
	if r.target.tls {
		// The benchmark's servers have self-signed certificates.
		tcfg := &tls.Config{InsecureSkipVerify: true}
		if r.cfg.TLSX25519 {
			tcfg.CurvePreferences = []tls.CurveID{tls.X25519}
		}
		tc := tls.Client(nc, tcfg)
		hctx, cancel := context.WithTimeout(ctx, r.cfg.ConnectTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake: %w", err)
		}
		nc = tc
	}
	c := &wsConn{id: id, r: r, nc: nc, wake: make(chan struct{}, 1), done: make(chan struct{})}
	c.seqFirst.Store(-1)
	c.seqLast.Store(-1)
	r.rndMu.Lock()
	var raw [16]byte
	for i := range raw {
		raw[i] = byte(r.rnd.Uint32())
	}
	for i := range c.key {
		c.key[i] = byte(r.rnd.Uint32())
	}
	r.rndMu.Unlock()
	if err := c.handshake(base64.StdEncoding.EncodeToString(raw[:])); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *wsConn) handshake(key string) error {
	t := c.r.target
	_ = c.nc.SetDeadline(time.Now().Add(c.r.cfg.ConnectTimeout))
	defer c.nc.SetDeadline(time.Time{})
	ext := ""
	if c.r.cfg.Deflate {
		ext = "Sec-WebSocket-Extensions: " + deflateOffer(c.r.cfg.DeflateNoContext) + "\r\n"
	}
	req := "GET " + t.path + " HTTP/1.1\r\nHost: " + t.host +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " + key +
		"\r\nSec-WebSocket-Version: 13\r\n" + ext + "\r\n"
	if _, err := io.WriteString(c.nc, req); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	buf := make([]byte, 0, 1024)
	var end int
	for {
		if len(buf) == cap(buf) {
			if cap(buf) >= 16<<10 {
				return errors.New("handshake: response header over 16 KiB")
			}
			buf = append(buf, make([]byte, cap(buf))...)[:len(buf)]
		}
		n, err := c.nc.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if i := bytes.Index(buf, []byte("\r\n\r\n")); i >= 0 {
			end = i + 4
			break
		}
		if err != nil {
			return fmt.Errorf("handshake: reading the response: %w", err)
		}
	}
	lines := strings.Split(string(buf[:end-4]), "\r\n")
	if f := strings.Fields(lines[0]); len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") || f[1] != "101" {
		return fmt.Errorf("handshake: status %q, want 101", lines[0])
	}
	var upgrade, connection, accept string
	var extensions []string
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			return fmt.Errorf("handshake: bad header line %q", l)
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "upgrade":
			upgrade = value
		case "connection":
			connection = value
		case "sec-websocket-accept":
			accept = value
		case "sec-websocket-extensions":
			if !c.r.cfg.Deflate {
				return fmt.Errorf("handshake: server chose extensions %q that were not offered", value)
			}
			extensions = append(extensions, value)
		}
	}
	if !strings.EqualFold(upgrade, "websocket") {
		return fmt.Errorf("handshake: Upgrade %q, want websocket", upgrade)
	}
	if !headerHasToken(connection, "upgrade") {
		return fmt.Errorf("handshake: Connection %q lacks upgrade", connection)
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	if want := base64.StdEncoding.EncodeToString(sum[:]); accept != want {
		return fmt.Errorf("handshake: Sec-WebSocket-Accept %q, want %q", accept, want)
	}
	if c.r.cfg.Deflate {
		p, ok, err := acceptDeflate(strings.Join(extensions, ", "), c.r.cfg.DeflateNoContext)
		if err != nil {
			return fmt.Errorf("handshake: %w", err)
		}
		if !ok {
			return errors.New("handshake: the server declined permessage-deflate (-deflate needs it)")
		}
		c.defl, c.infl, c.deflateAt = newDeflater(p), newInflater(p), p.response
	}
	if end < len(buf) {
		c.leftover = append([]byte(nil), buf[end:]...)
	}
	return nil
}

func headerHasToken(v, token string) bool {
	for _, t := range strings.Split(v, ",") {
		if strings.EqualFold(strings.TrimSpace(t), token) {
			return true
		}
	}
	return false
}

// writeLoop sends messages while the window, the rate and the run allow.
func (c *wsConn) writeLoop(start <-chan struct{}) {
	r := c.r
	select {
	case <-start:
	case <-r.stop:
		return
	}
	m := r.msg
	W := int64(r.cfg.Window)
	if c.defl != nil {
		c.plain = append([]byte(nil), m.data...)
		defer c.defl.release() // the writer is done: its compressor (~0.5 MB) can go
	}

	// The frame template: header and masked payload. Only the sequence field changes between
	// messages, so each message costs a copy and a patch of at most 16 bytes.
	frame := appendHeader(nil, m.op, len(m.data), true, c.key)
	hdrLen := len(frame)
	frame = append(frame, m.data...)
	maskBytes(c.key, 0, frame[hdrLen:])
	var seq [16]byte
	patch := func(dst []byte, s uint64) {
		m.putSeq(seq[:], s)
		for i := 0; i < m.seqLen; i++ {
			dst[hdrLen+i] = seq[i] ^ c.key[i&3]
		}
	}
	const batchBytes = 256 << 10
	var wbuf []byte
	big := len(frame) > 64<<10
	if !big {
		wbuf = make([]byte, 0, min(int64(batchBytes), W*int64(len(frame))))
	}
	// Refill the window when a part of it is free, not after every echo: a server that
	// writes each echo on its own would otherwise cost a write here per message too.
	refill := max(1, W/refillDiv)
	var timer *time.Timer
	var sent int64
	for {
		if r.stopped() {
			return
		}
		if r.cfg.Count > 0 && sent >= r.cfg.Count {
			return
		}
		avail := W - (sent - c.acked.Load())
		if avail < refill && !(r.cfg.Count > 0 && sent+avail >= r.cfg.Count) {
			select {
			case <-c.wake:
			case <-r.stop:
				return
			}
			continue
		}
		if r.cfg.Rate > 0 {
			// Each connection's schedule is shifted by its share of one period, so that
			// the connections send evenly spread over it, not all at each tick.
			phase := float64(c.id%r.cfg.Conns) / float64(r.cfg.Conns) / r.cfg.Rate
			elapsed := time.Since(r.startTime).Seconds() - phase
			allowed := int64(math.Floor(elapsed*r.cfg.Rate)) + 1 - sent
			if allowed <= 0 {
				wait := time.Duration((float64(sent)/r.cfg.Rate - elapsed) * float64(time.Second))
				if timer == nil {
					timer = time.NewTimer(max(wait, 0))
				} else {
					timer.Reset(max(wait, 0))
				}
				select {
				case <-timer.C:
				case <-r.stop:
					return
				}
				continue
			}
			avail = min(avail, allowed)
		}
		if r.cfg.Count > 0 {
			avail = min(avail, r.cfg.Count-sent)
		}
		now := r.now()
		var err error
		if c.defl != nil {
			// Every message is compressed on its own: with context takeover its bytes depend
			// on every message before it.
			if big {
				avail = 1
			} else {
				avail = min(avail, max(int64(cap(wbuf)/len(frame)), 1))
			}
			wbuf = wbuf[:0]
			for i := int64(0); i < avail && err == nil; i++ {
				c.times[(sent+i)%W].Store(now)
				wbuf, err = c.appendCompressed(wbuf, uint64(sent+i))
			}
			if err != nil {
				r.fail(fmt.Errorf("connection %d: compressing: %w", c.id, err))
				return
			}
			c.sent.Store(sent + avail)
			c.wmu.Lock()
			_, err = c.nc.Write(wbuf)
			c.wmu.Unlock()
		} else if big {
			patch(frame, uint64(sent))
			c.times[sent%W].Store(now)
			avail = 1
			c.sent.Store(sent + avail) // before the write: the echo may come back before Write returns
			c.wmu.Lock()
			_, err = c.nc.Write(frame)
			c.wmu.Unlock()
		} else {
			avail = min(avail, max(int64(cap(wbuf)/len(frame)), 1))
			wbuf = wbuf[:0]
			for i := int64(0); i < avail; i++ {
				off := len(wbuf)
				wbuf = append(wbuf, frame...)
				patch(wbuf[off:], uint64(sent+i))
				c.times[(sent+i)%W].Store(now)
			}
			c.sent.Store(sent + avail)
			c.wmu.Lock()
			_, err = c.nc.Write(wbuf)
			c.wmu.Unlock()
		}
		if err != nil {
			if !r.stopped() {
				if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
					err = fmt.Errorf("server closed the connection (write: %w)", err)
				}
				r.fail(fmt.Errorf("connection %d: write: %w", c.id, err))
			}
			return
		}
		sent += avail
	}
}

// appendCompressed appends message s as one masked frame: compressed with RSV1 set, or plain
// when the negotiated window cannot hold it.
func (c *wsConn) appendCompressed(dst []byte, s uint64) ([]byte, error) {
	m := c.r.msg
	m.putSeq(c.plain, s)
	z, ok, err := c.defl.compress(c.zbuf[:0], c.plain)
	if err != nil {
		return dst, err
	}
	payload := c.plain
	if ok {
		c.zbuf = z
		payload = z
	}
	at := len(dst)
	dst = appendHeader(dst, m.op, len(payload), true, c.key)
	if ok {
		dst[at] |= rsv1
	}
	off := len(dst)
	dst = append(dst, payload...)
	maskBytes(c.key, 0, dst[off:])
	c.txWire.Add(int64(len(payload)))
	c.txPlain.Add(int64(len(c.plain)))
	return dst, nil
}

// readState is the reader's position in the frame and message stream.
type readState struct {
	inFrame   bool
	fin       bool
	masked    bool
	key       [4]byte
	maskPos   int
	frameLeft int64

	inMsg  bool
	msgOp  byte
	msgOff int
	seq    [16]byte // the expected sequence field of the current message

	compressed bool   // the current message has RSV1: its payload collects in comp
	comp       []byte // compressed payload of the current message
	wire       int64  // payload bytes of the current message on the wire

	// With Config.Seq: the sequence number at the start of the current message's payload.
	seqVal    uint64
	seqDigits int  // digits read so far; seqMaxDigits+1 when there were too many
	seqEnd    bool // a byte that is not a digit was seen: seqVal is complete
}

const seqMaxDigits = 18 // fits an int64

// feedSeq reads the leading digits of a message's payload from p, the next bytes of it.
func (st *readState) feedSeq(p []byte) {
	for _, b := range p {
		if st.seqEnd {
			return
		}
		if b < '0' || b > '9' {
			st.seqEnd = true
			return
		}
		if st.seqDigits == seqMaxDigits {
			st.seqDigits, st.seqEnd = seqMaxDigits+1, true
			return
		}
		st.seqVal = st.seqVal*10 + uint64(b-'0')
		st.seqDigits++
	}
}

// checkSeq checks the sequence number of message n, just completed, against the connection's
// last one, and records it.
func (c *wsConn) checkSeq(st *readState, n int64) error {
	switch {
	case st.seqDigits == 0:
		return perr("message %d: no sequence number at the start of its payload", n)
	case st.seqDigits > seqMaxDigits:
		return perr("message %d: sequence number of more than %d digits", n, seqMaxDigits)
	}
	s := int64(st.seqVal)
	if last := c.seqLast.Load(); last >= 0 && s != last+1 {
		what := "lost"
		if s <= last {
			what = "repeated or out of order"
		}
		return perr("message %d: sequence number %d after %d (%s)", n, s, last, what)
	}
	if c.seqFirst.Load() < 0 {
		c.seqFirst.Store(s)
	}
	c.seqLast.Store(s)
	return nil
}

// protoError is a frame the client must not accept.
type protoError struct{ msg string }

func (e *protoError) Error() string { return e.msg }

func perr(format string, a ...any) error { return &protoError{fmt.Sprintf(format, a...)} }

// readLoop reads frames until the connection closes, verifying every echo.
func (c *wsConn) readLoop() {
	defer close(c.done)
	r := c.r
	size := 4 << 10
	if !r.cfg.RecvOnly {
		size = max(size, min(readBufMax, r.cfg.Window*(len(r.msg.data)+14)))
	} else {
		size = 64 << 10
	}
	buf := make([]byte, size)
	n := copy(buf, c.leftover)
	c.leftover = nil
	var st readState
	next := int64(0) // sequence number of the next expected echo
	var rx int64
	for {
		if n > 0 {
			now := r.now()
			used, got, bytesGot, err := c.process(buf[:n], &st, next, now)
			if err != nil {
				if errors.Is(err, errClosed) {
					return
				}
				r.fail(fmt.Errorf("connection %d: %w (after %d echoes)", c.id, err, next))
				return
			}
			if got > 0 {
				next += got
				rx += bytesGot
				c.rxBytes.Store(rx)
				c.acked.Store(next)
				if n := r.cfg.Count; r.cfg.RecvOnly && n > 0 && next >= n && next-got < n {
					r.received()
				}
				select {
				case c.wake <- struct{}{}:
					// Let the writer refill the window now rather than when this reader
					// next blocks: the window then flows in chunks instead of bouncing
					// between the peers as one batch.
					runtime.Gosched()
				default:
				}
			}
			n = copy(buf, buf[used:n]) // at most a partial header or control frame remains
		}
		m, err := c.nc.Read(buf[n:])
		n += m
		if err != nil && m == 0 {
			if c.closing.Load() || r.aborted.Load() {
				return // the end we asked for, or another connection failed first
			}
			if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
				r.fail(fmt.Errorf("connection %d: server closed the connection without a close frame (after %d echoes, %d in flight)",
					c.id, next, c.sent.Load()-next))
			} else if errors.Is(err, os.ErrDeadlineExceeded) {
				return
			} else {
				r.fail(fmt.Errorf("connection %d: read: %w (after %d echoes)", c.id, err, next))
			}
			return
		}
	}
}

const (
	// readBufMax caps a connection's read buffer; a message larger than that is verified as
	// it streams through.
	readBufMax = 256 << 10
	// refillDiv: the writer refills the window once 1/refillDiv of it is free.
	refillDiv = 8
)

var errClosed = errors.New("closed")

// process parses the frames in b, verifies the payload of each echo against the message it
// answers, and returns the bytes consumed, the messages completed and their payload bytes.
// Payload is consumed as it arrives, so a message need not fit in the buffer.
func (c *wsConn) process(b []byte, st *readState, next int64, now int64) (used int, got, bytesGot int64, err error) {
	r := c.r
	m := r.msg
	verify := !r.cfg.RecvOnly
	i := 0
	for {
		if !st.inFrame {
			if len(b)-i < 2 {
				return i, got, bytesGot, nil
			}
			b0, b1 := b[i], b[i+1]
			hl := 2
			n := int64(b1 & 0x7f)
			switch n {
			case 126:
				hl += 2
			case 127:
				hl += 8
			}
			masked := b1&0x80 != 0
			if masked {
				hl += 4
			}
			if len(b)-i < hl {
				return i, got, bytesGot, nil
			}
			switch n {
			case 126:
				n = int64(b[i+2])<<8 | int64(b[i+3])
			case 127:
				n = 0
				for _, x := range b[i+2 : i+10] {
					n = n<<8 | int64(x)
				}
				if n < 0 {
					return i, got, bytesGot, perr("frame length over 2^63")
				}
			}
			fin := b0&0x80 != 0
			op := b0 & 0x0f
			compressed := b0&rsv1 != 0
			if rsv := b0 & 0x70; rsv != 0 && (rsv != rsv1 || c.infl == nil) {
				if c.infl == nil {
					return i, got, bytesGot, perr("frame with RSV bits %#x (no extension was negotiated)", rsv)
				}
				return i, got, bytesGot, perr("frame with RSV bits %#x (permessage-deflate uses RSV1 only)", rsv)
			}
			if compressed && op != opText && op != opBinary {
				return i, got, bytesGot, perr("RSV1 on a frame with opcode %#x (only a message's first frame may have it)", op)
			}
			if masked && !r.cfg.AllowMasked {
				return i, got, bytesGot, perr("masked frame from the server (use -allow-masked for raw echo servers)")
			}
			var key [4]byte
			if masked {
				copy(key[:], b[i+hl-4:i+hl])
			}
			if op >= 8 {
				if !fin || n > 125 {
					return i, got, bytesGot, perr("bad control frame (opcode %#x, fin %v, length %d)", op, fin, n)
				}
				if int64(len(b)-i-hl) < n {
					return i, got, bytesGot, nil // wait for the whole control frame
				}
				p := b[i+hl : i+hl+int(n)]
				if masked {
					maskBytes(key, 0, p)
				}
				i += hl + int(n)
				if err := c.control(op, p); err != nil {
					return i, got, bytesGot, err
				}
				continue
			}
			switch op {
			case opText, opBinary:
				if st.inMsg {
					return i, got, bytesGot, perr("new message (opcode %#x) while a fragmented message is open", op)
				}
				if verify && op != m.op {
					return i, got, bytesGot, perr("message %d: echo has opcode %#x, sent %#x", next+got, op, m.op)
				}
				st.inMsg, st.msgOp, st.msgOff, st.compressed, st.wire = true, op, 0, compressed, 0
				st.seqVal, st.seqDigits, st.seqEnd = 0, 0, false
				if verify {
					m.putSeq(st.seq[:], uint64(next+got))
				}
			case opContinuation:
				if !st.inMsg {
					return i, got, bytesGot, perr("continuation frame with no message open")
				}
			default:
				return i, got, bytesGot, perr("reserved opcode %#x", op)
			}
			if st.compressed {
				if int64(len(st.comp))+n > c.maxCompressed() {
					return i, got, bytesGot, perr("message %d: compressed echo over %d bytes", next+got, c.maxCompressed())
				}
			} else if verify && int64(st.msgOff)+n > int64(len(m.data)) {
				return i, got, bytesGot, perr("message %d: echo is longer than the %d bytes sent", next+got, len(m.data))
			}
			st.inFrame, st.fin, st.masked, st.key, st.maskPos, st.frameLeft = true, fin, masked, key, 0, n
			i += hl
		}
		take := min(st.frameLeft, int64(len(b)-i))
		chunk := b[i : i+int(take)]
		if st.masked {
			st.maskPos = maskBytes(st.key, st.maskPos, chunk)
		}
		if st.compressed {
			st.comp = append(st.comp, chunk...)
		} else {
			if r.cfg.Seq && !st.seqEnd {
				st.feedSeq(chunk)
			}
			if verify {
				if at := m.mismatch(st.seq[:], st.msgOff, chunk); at >= 0 {
					return i, got, bytesGot, perr("message %d: echo differs from what was sent at byte %d", next+got, at)
				}
			}
			st.msgOff += int(take)
		}
		st.wire += take
		st.frameLeft -= take
		i += int(take)
		if st.frameLeft > 0 {
			return i, got, bytesGot, nil
		}
		st.inFrame = false
		if !st.fin {
			continue
		}
		if st.compressed {
			if err := c.inflateEcho(st, next+got, verify); err != nil {
				return i, got, bytesGot, err
			}
		}
		c.rxWire.Add(st.wire)
		if r.cfg.Seq {
			if err := c.checkSeq(st, next+got); err != nil {
				return i, got, bytesGot, err
			}
		}
		if verify {
			if st.msgOff != len(m.data) {
				return i, got, bytesGot, perr("message %d: echo has %d bytes, sent %d", next+got, st.msgOff, len(m.data))
			}
			s := next + got
			if s >= c.sent.Load() {
				return i, got, bytesGot, perr("message %d: echo of a message that was not sent", s)
			}
			r.hist.Record(uint64(max(now-c.times[s%int64(r.cfg.Window)].Load(), 0)))
		}
		got++
		bytesGot += int64(st.msgOff)
		st.inMsg = false
	}
}

// maxCompressed bounds a compressed message's payload: what was sent, with room for data that
// does not compress, when verifying; maxInflate otherwise.
func (c *wsConn) maxCompressed() int64 {
	if c.r.cfg.RecvOnly {
		return maxInflate
	}
	return int64(len(c.r.msg.data))*11/10 + 1024
}

// inflateEcho inflates the compressed message collected in st.comp and verifies its bytes as
// they come out, as process does for a plain echo.
func (c *wsConn) inflateEcho(st *readState, s int64, verify bool) error {
	m := c.r.msg
	limit := int64(maxInflate)
	if verify {
		limit = int64(len(m.data))
	}
	_, err := c.infl.inflate(st.comp, limit, func(out []byte) error {
		if c.r.cfg.Seq && !st.seqEnd {
			st.feedSeq(out)
		}
		if verify {
			if st.msgOff+len(out) > len(m.data) {
				return perr("message %d: inflated echo is longer than the %d bytes sent", s, len(m.data))
			}
			if at := m.mismatch(st.seq[:], st.msgOff, out); at >= 0 {
				return perr("message %d: inflated echo differs from what was sent at byte %d", s, at)
			}
		}
		st.msgOff += len(out)
		return nil
	})
	st.comp = st.comp[:0]
	st.compressed = false
	if err != nil {
		if msg := err.Error(); !strings.HasPrefix(msg, "message ") {
			err = perr("message %d: %s", s, msg)
		}
		return err
	}
	return nil
}

// control handles a ping, pong or close frame.
func (c *wsConn) control(op byte, p []byte) error {
	switch op {
	case opPing:
		frame := appendHeader(nil, opPong, len(p), true, c.key)
		off := len(frame)
		frame = append(frame, p...)
		maskBytes(c.key, 0, frame[off:])
		c.wmu.Lock()
		_, err := c.nc.Write(frame)
		c.wmu.Unlock()
		if err != nil && !c.closing.Load() {
			return fmt.Errorf("writing a pong: %w", err)
		}
		return nil
	case opPong:
		c.gotPong(p)
		return nil
	case opClose:
		if c.closing.Load() {
			return errClosed
		}
		code, reason := 1005, ""
		if len(p) >= 2 {
			code, reason = int(p[0])<<8|int(p[1]), string(p[2:])
		}
		return fmt.Errorf("server sent a close frame (code %d, reason %q)", code, reason)
	}
	return perr("reserved control opcode %#x", op)
}

// sendClose writes a close frame (1000) and lets the reader wait briefly for the reply.
func (c *wsConn) sendClose() {
	c.closing.Store(true)
	frame := appendHeader(nil, opClose, 2, true, c.key)
	off := len(frame)
	frame = append(frame, 0x03, 0xe8)
	maskBytes(c.key, 0, frame[off:])
	c.wmu.Lock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.nc.Write(frame)
	c.wmu.Unlock()
	_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
}
