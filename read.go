package gust

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/deflate"
	"github.com/gustws/gust/internal/mask"
	"github.com/gustws/gust/internal/utf8"
)

// The reader, top to bottom: the read state; the read loop (serve), which
// feeds the parser what the transport reads and parks or hands off the
// connection when it yields; the parser (parse), which takes the bytes read
// so far into frames and messages and says what it wants next; the reads
// that feed it; and the bound on a message that never finishes
// (Options.MessageTimeout).

const minReadBufferSize = 512

// A connection's turn on an event loop (netpoll mode) is bounded by the
// work it does, not by its reads: once it has read and inflated
// loopWorkBudget bytes, and before it inflates a message of more than
// loopInflateMax bytes on the wire (up to 1,032 times as many once
// inflated, and as much work again for a handler that answers it), the
// connection goes on on a goroutine of its own (handOff).
const (
	loopWorkBudget = 1 << 20
	loopInflateMax = 1 << 10
)

// maxEmptyFrames bounds the empty frames before the last one of a message:
// they carry nothing, and a peer that sends them without end would keep
// the connection busy and its message open for ever.
const maxEmptyFrames = 1 << 10

// waitingReadBufferSize bounds the read buffer of connections that cannot
// wait for bytes without one.
const waitingReadBufferSize = 8 << 10

// readState is the read side of a Conn, owned by the read goroutine.
type readState struct {
	buf  *[]byte // pooled; bytes buf[r:w] are read and not yet parsed
	r, w int

	// the data message being assembled
	msg  *[]byte
	n    int
	slab *messageSlab // Messages for what the last read brought

	// The frame in progress, kept across reads so that parsing resumes
	// where the bytes ran out: in netpoll mode a loop parses what a
	// readable event brought, and never waits for the rest.
	hdr frameHeader
	end int // the message's length once the frame is read

	op         Opcode // 0 when no message is in progress
	compressed bool   // the message in progress has RSV1 set
	utf8       utf8.Validator
	uncorkDue  bool   // cork was called: uncork flushes before the next blocking read
	inFrame    bool   // hdr is read; its payload is not yet all read
	begun      bool   // beginData has taken hdr into the message
	stream     bool   // beginData chose to stream the message (StreamThreshold)
	loop       bool   // parsing on an event loop: never wait (yield)
	called     bool   // a callback ran in this turn on the loop (loopConn.Held)
	drained    bool   // on the loop, the last read took all there was (readSome)
	userReads  bool   // a streamed message's handler reads: reads wait, never park
	armed      bool   // a deadline or a wake-up bounds the wait for the message in progress
	pos        uint8  // the masking key's position in the frame's payload, 0-3
	empty      uint16 // empty non-final frames of the message in progress (maxEmptyFrames)
	work       uint32 // bytes read and inflated in this turn on the loop (loopWorkBudget)
	since      uint32 // clockMS when the frame or message in progress first waited for bytes; 0: it has not
	direct     uint32 // bytes a read put straight into the message buffer at n (wantPayload), for parsePayload

	// readDL is the read deadline the user set, in Unix nanoseconds (0 for
	// none), in goroutine mode, where a deadline for the message in
	// progress (Options.MessageTimeout) may stand in for it.
	readDL atomic.Int64
}

// idle reports whether nothing is in progress in rd: no bytes, no
// message, no frame, no flush owed, no handler reading (putRead).
func (rd *readState) idle() bool {
	return rd.buf == nil && rd.msg == nil && rd.slab == nil && rd.op == 0 && !rd.inFrame && !rd.uncorkDue && !rd.userReads
}

// addWork counts n bytes of work in this turn on the loop.
func (rd *readState) addWork(n int) {
	if rd.work < loopWorkBudget {
		rd.work += uint32(min(n, loopWorkBudget))
	}
}

// release gives the read buffer back; the message in progress, if any, is
// kept.
func (rd *readState) release() {
	if rd.buf != nil {
		bufpool.Put(rd.buf)
		rd.buf = nil
	}
	rd.r, rd.w = 0, 0
}

// startTurn begins a turn of parsing on an event loop, which found the
// connection readable.
func (rd *readState) startTurn() {
	rd.loop, rd.work, rd.drained, rd.called = true, 0, false, false
}

// shrink moves the few bytes of a frame that came in part (a header, a
// control frame) out of the read buffer into one their size, so that a
// connection parked in the middle of a frame holds no more than the frame
// needs; a drained buffer goes back.
func (rd *readState) shrink() {
	if rd.buf == nil {
		return
	}
	n := rd.w - rd.r
	if n == 0 {
		rd.release()
		return
	}
	if len(*rd.buf) <= minReadBufferSize || n > minReadBufferSize/2 {
		return
	}
	nb := bufpool.Get(minReadBufferSize)
	copy(*nb, (*rd.buf)[rd.r:rd.w])
	bufpool.Put(rd.buf)
	rd.buf, rd.r, rd.w = nb, 0, n
}

// releaseAll gives every buffer back, when the connection ends.
func (rd *readState) releaseAll() {
	rd.release()
	rd.putSlab()
	if rd.msg != nil {
		bufpool.Put(rd.msg)
		rd.msg = nil
	}
}

// inMessage reports whether a frame or a message is in progress, whose
// rest the next read waits for.
func (rd *readState) inMessage() bool { return rd.op != 0 || rd.inFrame || rd.r < rd.w }

// growMessage makes room in the message buffer for the bytes that have
// arrived (rd.buf[r:w]) and more: about twice the message so far, never
// what a header announces, so that a peer that announces 16 MiB and sends
// 1 KiB holds about 1 KiB, and a message in many pieces grows
// geometrically, in linear time. The last frame's end bounds the size;
// before it, the size limit does, and the stream threshold past which the
// message is streamed.
func (rd *readState) growMessage(fin bool, end int, limit int64, threshold int) {
	size := max(2*rd.n, rd.n+rd.w-rd.r)
	if fin {
		size = min(size, end)
	} else {
		size = int(min(int64(size), limit))
		if threshold > 0 {
			size = min(size, threshold)
		}
	}
	if fin && size < end {
		// A buffer for the whole frame that the pool already holds commits
		// no new memory: take it rather than grow to it by doubling,
		// copying the message at each step.
		if nb := bufpool.TryGet(end); nb != nil {
			if rd.msg != nil {
				copy(*nb, (*rd.msg)[:rd.n])
				bufpool.Put(rd.msg)
			}
			rd.msg = nb
			return
		}
	}
	rd.msg = bufpool.Grow(rd.msg, size)
}

// countEmpty counts h, the header of a data frame of the message in
// progress, if it is empty and not the last (maxEmptyFrames).
func (rd *readState) countEmpty(h *frameHeader) error {
	if h.length > 0 || h.fin {
		return nil
	}
	if rd.empty++; rd.empty > maxEmptyFrames {
		return protocolError(StatusPolicyViolation, "more than 1024 empty frames in one message")
	}
	return nil
}

// serve reads and dispatches until the connection ends, and ends it; in
// netpoll mode, until it has nothing to read, and then parks it. On an
// event loop (c.rd.loop), whatever would wait goes to a goroutine instead:
// the rest of a message streamed to its handler, writes the socket did not
// take, the end of the connection (loopEnds, the peer's close frame
// included). It reports whether a callback ran on the loop (Held).
func (c *Conn) serve(open bool) (called bool) {
	for {
		y, err := c.run(open)
		open = false
		called = called || c.rd.called
		switch y {
		case park:
			if (*loopConn)(c).park() {
				// Bytes came meanwhile, the socket was closed or the read
				// deadline passed: serve on, with a read that finds out.
				c.rd.drained = false
				continue
			}
			return called
		case handOff:
			c.rd.loop = false
			c.rd.shrink()
			go c.serveOffLoop()
			return called
		case handOffEnd:
			c.rd.loop = false
			c.rd.shrink() // the close frame, in a buffer its size
			ends.add(c, nil)
			return called
		}
		if c.rd.loop {
			c.rd.loop = false
			c.rd.releaseAll()
			ends.add(c, err)
			return called
		}
		c.end(err)
		return called
	}
}

// serveOffLoop serves on a goroutine of its own a connection an event loop
// handed over (handOff): it writes what the socket did not take on the
// loop, then reads on where the loop stopped, and parks again once idle.
func (c *Conn) serveOffLoop() {
	c.wr.mu.Lock()
	err := c.writeFailed(c.writeBacklogLocked())
	c.wr.mu.Unlock()
	if err != nil {
		c.end(err)
		return
	}
	c.serve(false)
}

// run calls OnOpen (when open is set) and reads until the connection ends
// or yields. A panic in a callback, unless Options.DisableRecovery is set,
// becomes a *PanicError, which end answers with 1011.
func (c *Conn) run(open bool) (y yield, err error) {
	if !c.cfg.DisableRecovery {
		defer func() {
			if p := recover(); p != nil {
				y, err = goOn, c.recovered(p)
			}
		}()
	}
	if open {
		c.handler.OnOpen(c)
	}
	return c.readFrames()
}

// recovered logs the panic p of a callback and returns it as a
// *PanicError; the caller sends the 1011.
func (c *Conn) recovered(p any) error {
	pe := &PanicError{Value: p, Stack: debug.Stack()}
	c.cfg.logger().LogAttrs(context.Background(), slog.LevelError, "gust: panic in event handler",
		c.remoteAttr(), slog.Int("code", int(StatusInternalError)), slog.String("panic", fmt.Sprint(p)),
		slog.String("stack", string(pe.Stack)))
	return pe
}

// yield is why serving a connection stops without its end (netpoll
// mode). The transport side decides it: the parser only says what it needs
// next (want).
type yield uint8

const (
	goOn       yield = iota
	park             // nothing more has arrived: park on the event loop (Conn.park)
	handOff          // what comes next may wait: go on on a goroutine of its own (serveOffLoop)
	handOffEnd       // the peer's close frame: the connection ends off the loop (loopEnds)
)

// want is what the parser needs to go on when it stops without an error.
type want uint8

const (
	wantBytes     want = iota + 1 // more bytes, into the read buffer (fill)
	wantPayload                   // more of a large payload, read straight into the message buffer at rd.n
	wantGoroutine                 // nothing: what comes next may wait, which an event loop must not
	wantEnd                       // nothing: the peer's close frame, which ends the connection off the loop
)

// readFrames feeds the parser (parse) what the transport reads until the
// connection ends or yields. It returns a *CloseError for the peer's
// close, a *ProtocolError for a violation (the caller sends the close
// frame), or the I/O error. A yield leaves the frame in progress in c.rd,
// where the next call resumes.
func (c *Conn) readFrames() (yield, error) {
	rd := c.rd
	for {
		w, err := c.parse()
		switch {
		case err != nil:
			return goOn, err
		case w == wantGoroutine:
			return handOff, nil
		case w == wantEnd:
			return handOffEnd, nil
		}
		var y yield
		if w == wantPayload {
			var k int
			k, y, err = c.read((*rd.msg)[rd.n:min(rd.end, len(*rd.msg))])
			rd.direct = uint32(k)
		} else {
			y, err = c.fill()
		}
		if err != nil {
			if rd.inMessage() {
				err = noEOF(err) // the peer left in the middle of a frame or message
			}
			return goOn, err
		}
		if y != goOn {
			return y, nil
		}
	}
}

// parse parses and dispatches the frames in the bytes read so far
// (rd.buf[r:w], and those a read put straight into the message buffer),
// until it needs more (want), or an error or the peer's close frame ends
// the connection. It keeps the frame in progress in rd across calls, and
// reads nothing itself: readFrames feeds it.
func (c *Conn) parse() (want, error) {
	rd := c.rd
	h := &rd.hdr
	for {
		if !rd.inFrame {
			var b []byte
			if rd.buf != nil {
				b = (*rd.buf)[rd.r:rd.w]
			}
			n, err := parseFrameHeader(b, h, c.server, c.deflate != nil)
			if err != nil || n == 0 {
				return wantBytes, err
			}
			rd.r += n
			rd.inFrame, rd.begun, rd.pos = true, false, 0
		}
		var w want
		var err error
		if h.op.isControl() {
			w, err = c.parseControl(h)
		} else {
			w, err = c.parseData(h)
		}
		if w != 0 || err != nil {
			return w, err
		}
		rd.inFrame = false
		if rd.op == 0 {
			rd.since = 0 // whole messages: the next one's bound starts afresh
		}
	}
}

// parseControl handles a control frame once its payload has arrived; a
// close frame is not handled on an event loop: its answer may wait on the
// socket, and the end of the connection does.
func (c *Conn) parseControl(h *frameHeader) (want, error) {
	rd := c.rd
	n := int(h.length)
	switch {
	case rd.w-rd.r < n:
		return wantBytes, nil
	case h.op == opClose && rd.loop:
		return wantEnd, nil
	}
	return 0, c.control(h)
}

// control handles the control frame h, whose payload is buffered.
func (c *Conn) control(h *frameHeader) error {
	rd := c.rd
	// Unmasked in place: the bytes are consumed, and stay put until the
	// next read from the socket, after the callback. An empty close frame
	// handed over from a loop has no buffer (serve shrinks it).
	p := []byte{}
	if rd.buf != nil {
		p = (*rd.buf)[rd.r : rd.r+int(h.length)]
	}
	unmask(c.server, p, p, h.key, 0)
	rd.r += len(p)
	switch h.op {
	case opPing:
		rd.called = true
		c.handler.OnPing(c, p)
	case opPong:
		c.pings.pong(p)
		rd.called = true
		c.handler.OnPong(c, p)
	case opClose:
		return c.readClose(p)
	}
	return nil
}

// unmask copies src to dst, unmasking on the server side; it returns the
// next key position.
func unmask(server bool, dst, src []byte, key [4]byte, pos int) int {
	if server {
		return mask.ApplyCopy(dst, src, key, pos)
	}
	copy(dst, src)
	return pos
}

// parseData takes a data frame's payload into the message being
// assembled, checking text as it arrives, and dispatches the message on its
// last frame. With Options.StreamThreshold set, a message that grows past
// it is handed to OnMessage as a stream instead (streamMessage), whose
// handler reads the rest: not on an event loop, since that waits.
func (c *Conn) parseData(h *frameHeader) (want, error) {
	rd := c.rd
	if !rd.begun {
		if err := c.beginData(h); err != nil {
			return 0, err
		}
	}
	if rd.stream {
		if rd.loop {
			return wantGoroutine, nil
		}
		return 0, c.streamMessage(h.fin, h.length, h.key)
	}
	if w, err := c.parsePayload(h); w != 0 || err != nil {
		return w, err
	}
	if !h.fin {
		return 0, nil
	}
	return c.endMessage(h.key)
}

// beginData takes the data frame h into the message: it starts one, or
// continues the one in progress, and checks the limits.
func (c *Conn) beginData(h *frameHeader) error {
	rd := c.rd
	if h.op == opContinuation {
		if rd.op == 0 {
			return protocolError(StatusProtocolError, "continuation frame without a message")
		}
	} else {
		if rd.op != 0 {
			return protocolError(StatusProtocolError, "new message inside a fragmented message")
		}
		rd.op = h.op
		rd.n = 0
		rd.empty = 0
		rd.compressed = h.compressed
		rd.utf8.Reset()
	}
	if err := rd.countEmpty(h); err != nil {
		return err
	}
	if h.length > c.cfg.wireLimit(rd.compressed)-int64(rd.n) { // not rd.n+length: that can wrap
		return protocolError(StatusMessageTooBig, "message over the size limit")
	}
	threshold := c.cfg.StreamThreshold
	rd.stream = threshold > 0 && h.length > int64(threshold-rd.n)
	rd.end = rd.n + int(h.length)
	rd.begun = true
	return nil
}

// parsePayload takes the payload of the frame h into the message, as far
// as the bytes go: those a read put straight into the message buffer
// (rd.direct), then the read buffer's. It keeps its place in rd (n, pos)
// when it wants more.
func (c *Conn) parsePayload(h *frameHeader) (want, error) {
	rd := c.rd
	fin, end, key := h.fin, rd.end, h.key
	checkText := rd.op == OpText && !c.cfg.SkipUTF8Validation && !rd.compressed
	pos := int(rd.pos)
	if k := int(rd.direct); k > 0 {
		rd.direct = 0
		dst := (*rd.msg)[rd.n : rd.n+k]
		if c.server {
			pos = mask.Apply(dst, key, pos)
		}
		rd.n += k
		if checkText && !rd.utf8.Feed(dst) {
			return 0, protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
		}
	}
	for rd.n < end {
		avail := rd.w - rd.r
		if rd.msg == nil || len(*rd.msg) == rd.n {
			if avail == 0 {
				// Memory follows the bytes that arrived, from the first:
				// a buffer for the message is taken once some have.
				rd.pos = uint8(pos)
				return wantBytes, nil
			}
			rd.growMessage(fin, end, c.cfg.wireLimit(rd.compressed), c.cfg.StreamThreshold)
		}
		dst := (*rd.msg)[rd.n:min(end, len(*rd.msg))]
		if avail == 0 {
			rd.pos = uint8(pos)
			if len(dst) >= c.cfg.ReadBufferSize/2 {
				return wantPayload, nil // large and nothing buffered: read straight into the message
			}
			return wantBytes, nil
		}
		dst = dst[:min(avail, len(dst))]
		pos = unmask(c.server, dst, (*rd.buf)[rd.r:rd.r+len(dst)], key, pos)
		rd.r += len(dst)
		rd.n += len(dst)
		if checkText && !rd.utf8.Feed(dst) {
			return 0, protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
		}
	}
	rd.pos = uint8(pos)
	return 0, nil
}

// endMessage completes the message whose last frame has been read (key
// was its masking key): it inflates a compressed one, checks its text and
// dispatches it.
func (c *Conn) endMessage(key [4]byte) (want, error) {
	rd := c.rd
	if rd.loop && c.parallel != nil && len(c.parallel) == cap(c.parallel) {
		return wantGoroutine, nil // dispatch would wait for a parallel handler to end
	}
	if rd.msg == nil { // an empty message
		rd.msg = bufpool.Get(0)
	}
	wire := rd.n
	if rd.compressed {
		if rd.loop && (wire > loopInflateMax || rd.work >= loopWorkBudget) {
			return wantGoroutine, nil // its inflating and its handler may take long
		}
		if err := c.inflateMessage(); err != nil {
			threshold := c.cfg.StreamThreshold
			if threshold > 0 && isTooBig(err) && int64(threshold) < c.cfg.maxMessageSize() {
				// Small on the wire, past the threshold once inflated:
				// stream it from the compressed bytes it has.
				rd.utf8.Reset()
				return 0, c.streamMessage(true, 0, key)
			}
			return 0, err
		}
		if rd.loop {
			rd.addWork(rd.n)
		}
	}
	// Uncompressed text was checked as it came; compressed, as it inflated.
	if rd.op == OpText && !c.cfg.SkipUTF8Validation && !rd.utf8.Complete() {
		return 0, protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
	}
	if mt := c.cfg.Metrics; mt != nil {
		mt.Received(c, rd.op, rd.n, wire)
	}
	m := rd.newMessage(rd.op, rd.msg, rd.n)
	rd.msg, rd.op, rd.n = nil, 0, 0
	if c.closing.has(closeSent) {
		m.Close() // the browser API drops messages that arrive while closing
		rd.recycle(m)
		return 0, nil
	}
	c.dispatch(m)
	return 0, nil
}

// inflateMessage replaces the compressed message in rd.msg with its
// inflated bytes, checking size and text as they come out.
func (c *Conn) inflateMessage() error {
	rd := c.rd
	var v *utf8.Validator
	if rd.op == OpText && !c.cfg.SkipUTF8Validation {
		v = &rd.utf8
	}
	limit := c.cfg.maxMessageSize()
	if t := int64(c.cfg.StreamThreshold); t > 0 && t < limit {
		limit = t // past it, the message is streamed instead
	}
	rd.msg = bufpool.Grow(rd.msg, rd.n+len(deflate.Tail))
	copy((*rd.msg)[rd.n:], deflate.Tail)
	out, n, err := c.deflate.Inflate((*rd.msg)[:rd.n+len(deflate.Tail)], limit, v)
	if err != nil {
		return inflateError(err)
	}
	bufpool.Put(rd.msg)
	rd.msg, rd.n = out, n
	return nil
}

// dispatch hands a message to OnMessage, on the read goroutine or, with
// Options.Parallel, on a short-lived goroutine.
func (c *Conn) dispatch(m *Message) {
	if c.parallel == nil {
		c.rd.called = true
		c.handler.OnMessage(c, m)
		c.rd.recycle(m)
		return
	}
	c.parallel <- struct{}{}
	c.inflight.Add(1)
	go func() {
		defer func() {
			<-c.parallel
			c.inflight.Done()
		}()
		if !c.cfg.DisableRecovery {
			defer func() {
				if p := recover(); p != nil {
					err := c.recovered(p)
					// Not on the read goroutine: no linger, which reads.
					c.writeCloseFrame(StatusInternalError, "")
					c.abort(err)
				}
			}()
		}
		c.handler.OnMessage(c, m)
	}()
}

// maxMessageSize is Options.MaxMessageSize, math.MaxInt for no limit.
func (cfg *config) maxMessageSize() int64 {
	limit := cfg.MaxMessageSize
	if limit < 0 || limit > math.MaxInt {
		limit = math.MaxInt
	}
	return limit
}

// wireLimit is the most a message may take on the wire: MaxMessageSize,
// which counts the message as the handler gets it, and for a compressed
// one deflate's worst case on top, since bytes that do not compress grow
// a little (by 5 bytes in 64 KiB in stored blocks, by up to an eighth in
// fixed Huffman codes): the limit plus an eighth plus 256 bytes. The
// inflated bytes are held to MaxMessageSize as they come out.
func (cfg *config) wireLimit(compressed bool) int64 {
	limit := cfg.maxMessageSize()
	if !compressed {
		return limit
	}
	if limit > (math.MaxInt-256)/9*8 {
		return math.MaxInt
	}
	return limit + limit/8 + 256
}

// isTooBig reports whether err is gust failing a message over the size
// limit.
func isTooBig(err error) bool {
	pe, ok := err.(*ProtocolError)
	return ok && pe.Code == StatusMessageTooBig
}

func protocolError(code StatusCode, reason string) error {
	return &ProtocolError{Code: code, Reason: reason}
}

// noEOF turns an EOF in the middle of a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// fill reads more bytes into the read buffer, making room at its end first.
func (c *Conn) fill() (yield, error) {
	rd := c.rd
	if rd.r == rd.w && c.direct() {
		// Drained: wait for bytes without a buffer (the transport takes one
		// once they have come).
		rd.release()
		rd.putSlab()
		_, y, err := c.read(nil)
		return y, err
	}
	if rd.buf == nil {
		size := c.cfg.ReadBufferSize
		if !c.direct() {
			// This connection holds its buffer while it waits (TLS, HTTP/2
			// streams): keep it small.
			size = min(size, waitingReadBufferSize)
		}
		rd.buf = bufpool.Get(max(size, minReadBufferSize))
	}
	rd.putSlab()
	b := *rd.buf
	if rd.r == rd.w {
		rd.r, rd.w = 0, 0
	} else if rd.r > 0 && len(b)-rd.r < minReadBufferSize {
		rd.w = copy(b, b[rd.r:rd.w])
		rd.r = 0
	}
	n, y, err := c.read(b[rd.w:])
	rd.w += n
	return y, err
}

// read reads from the connection into p (or, when p is nil, into a fresh
// pooled buffer that becomes the read buffer), flushing corked writes
// first, so that every write made while dispatching leaves before the read
// waits.
func (c *Conn) read(p []byte) (int, yield, error) {
	if y, err := c.uncork(); y != goOn || err != nil {
		return 0, y, err
	}
	if err := c.boundMessage(); err != nil {
		return 0, goOn, err
	}
	return c.readSome(p)
}

// readSome is read's one read. It waits for bytes, except where the
// connection parks (mayPark): then it yields park when nothing has
// arrived, and also on an event loop when the last read came short of its
// buffer: it took all there was then, and the descriptor is
// edge-triggered, so bytes that came since have queued a readable event,
// which resumes the connection once it parks (this saves the read that
// would find nothing). Not once the loop has seen the peer's end
// (peerEnded): a FIN that came with the last bytes, in their event, queues
// none, and only a read finds it. A connection that has done
// loopWorkBudget of work in this turn is handed to a goroutine, so that a
// peer that keeps sending cannot hold up the loop.
func (c *Conn) readSome(dst []byte) (int, yield, error) {
	rd := c.rd
	if rd.loop && !rd.drained && rd.work >= loopWorkBudget {
		return 0, handOff, nil
	}
	if hb := c.hb; hb != nil {
		hb.seen.Store(c.cfg.wheel.Now()) // for the heartbeat: silent from now until bytes arrive
	}
	if rd.loop && rd.drained {
		return 0, park, nil
	}
	try := c.mayPark()
	for {
		buf, n, again, err := c.tr.read(dst, try)
		switch {
		case again:
			return 0, park, nil
		case err != nil:
			if err = c.overdue(err); err != nil {
				return 0, goOn, err
			}
			continue
		case n == 0:
			continue
		}
		size := len(dst)
		if dst == nil {
			rd.buf, rd.r, rd.w = buf, 0, n
			size = c.cfg.idleReadSize()
		}
		if rd.loop {
			rd.addWork(n)
		}
		rd.drained = rd.loop && n < size && !c.peerEnded()
		if hb := c.hb; hb != nil {
			hb.seen.Store(hbBusy) // the peer is alive; this goroutine busy until it waits again
		}
		if !c.cork(drainedBatch(n, size)) {
			return n, handOff, nil
		}
		return n, goOn, nil
	}
}

// mayPark reports whether a read must not wait but park the connection
// when nothing has arrived: on an event loop, and in netpoll mode
// on any goroutine, except for a streamed message, whose handler reads
// from its callback.
func (c *Conn) mayPark() bool {
	return c.rd.loop || (!c.rd.userReads && c.sock() != nil)
}

// Corking: writes made while the read goroutine dispatches what one read
// brought (from its callbacks, or from other goroutines meanwhile) are
// appended to the write buffer and reach the socket together, in one system
// call, before the next read waits (uncork), instead of one each.

// cork makes writes append to the cork buffer; the read goroutine calls it
// when it starts dispatching freshly read bytes. early asks for an early
// flush of the batch (drainedBatch).
//
// On an event loop it also makes every write not wait (netWriteBacklog).
// It never waits for the write lock there: a goroutine holding it may be
// waiting for the socket, so it reports false, and the loop hands the
// connection, and the bytes it read, to a goroutine instead (handOff).
func (c *Conn) cork(early bool) bool {
	loop := c.rd.loop
	if c.parallel != nil && !loop {
		return true
	}
	if !loop {
		c.wr.mu.Lock()
	} else if !c.wr.mu.TryLock() {
		return false
	}
	if c.parallel == nil {
		c.wr.corked = true
		c.wr.early = early
	}
	c.wr.noWait = loop
	c.wr.mu.Unlock()
	c.rd.uncorkDue = true
	return true
}

// uncork flushes what was corked; the read goroutine calls it before each
// blocking read. On an event loop, what the socket does not take stays in
// the backlog, and the connection goes to a goroutine that writes it
// (handOff).
func (c *Conn) uncork() (yield, error) {
	if !c.rd.uncorkDue {
		return goOn, nil
	}
	if !c.rd.loop {
		c.wr.mu.Lock()
	} else if !c.wr.mu.TryLock() {
		return handOff, nil // stays corked: the goroutine flushes
	}
	c.rd.uncorkDue = false
	c.wr.corked, c.wr.early = false, false
	c.deflate.EndBatch()
	err := c.flushLocked()
	c.wr.noWait = false
	if err == nil && !c.rd.loop {
		err = c.writeFailed(c.writeBacklogLocked())
	}
	backlog := c.wr.backlog != nil
	c.wr.mu.Unlock()
	if err == nil && backlog {
		return handOff, nil
	}
	return goOn, err
}

// earlyFlushSize is how much a batch corks before its first flush when the
// read that brought it drained the socket and was large (earlyFlushBatch).
// The peer then sent all it could and waits for answers: a first part sent
// early lets it work while the rest of the batch is dispatched, instead of
// each side idling while the other handles a whole batch. A read that
// filled the buffer means more bytes are waiting, so the server is the one
// behind, and a small batch is answered soon anyway: those go out in one
// write. The cost is one write per earlyFlushBatch bytes read at most.
const (
	earlyFlushSize  = 16 << 10
	earlyFlushBatch = 40 << 10
)

// drainedBatch reports whether a read of n bytes into a buffer of size
// bytes calls for an early flush (earlyFlushSize).
func drainedBatch(n, size int) bool {
	return n < size && n >= earlyFlushBatch
}

// clockStart is the origin of clockMS.
var clockStart = time.Now()

// clockMS is a coarse monotonic clock: the milliseconds since clockStart,
// modulo 2^32 (a difference under 49 days is right), never 0.
func clockMS() uint32 {
	if ms := uint32(time.Since(clockStart).Milliseconds()); ms != 0 {
		return ms
	}
	return 1
}

// messageLeft returns how long the message in progress, or the TLS record
// crypto/tls holds part of (transport.inRecord), may still take of its
// bound (Options.MessageTimeout), counted from the first time it waited for
// bytes, which it records; ok is false when no bound applies.
func (c *Conn) messageLeft() (left time.Duration, ok bool) {
	rd := c.rd
	t := c.cfg.MessageTimeout.Truncate(time.Millisecond)
	if t <= 0 {
		return 0, false
	}
	if !rd.inMessage() && !c.tr.inRecord() {
		rd.since = 0 // the next message or record starts afresh
		return 0, false
	}
	now := clockMS()
	if rd.since == 0 {
		rd.since = now
	}
	return t - time.Duration(now-rd.since)*time.Millisecond, true
}

// boundMessage is called before a read, which may wait: in the middle of
// a frame or a message it fails the connection once the message has taken
// Options.MessageTimeout, and otherwise bounds the wait to come; so it does
// in the middle of a TLS record, before each read crypto/tls makes inside
// its own Read (recordBound). In goroutine mode the socket's read deadline
// does; a connection parked in netpoll mode is woken instead (park). The
// bound is left in place when the message ends, so that messages which
// keep coming do not set it at each read: one that fires for an earlier
// message is set again (overdue).
func (c *Conn) boundMessage() error {
	left, ok := c.messageLeft()
	switch {
	case !ok:
		return nil
	case left <= 0:
		return messageTimeout(c.cfg.MessageTimeout)
	}
	rd := c.rd
	if !rd.armed && c.sock() == nil {
		dl := time.Now().Add(left)
		if u := rd.readDL.Load(); u != 0 && u < dl.UnixNano() {
			dl = time.Unix(0, u)
		}
		c.conn.SetReadDeadline(dl)
		rd.armed = true
	}
	return nil
}

// overdue looks at a read's error in goroutine mode once boundMessage has
// set the read deadline: the message in progress past its bound fails the
// connection; the user's deadline passed is err; otherwise the deadline was
// set for an earlier message, and overdue sets the right one and returns
// nil: the caller reads again.
func (c *Conn) overdue(err error) error {
	rd := c.rd
	if !rd.armed || !errors.Is(err, os.ErrDeadlineExceeded) || c.sock() != nil {
		return err
	}
	if left, ok := c.messageLeft(); ok && left <= 0 {
		return messageTimeout(c.cfg.MessageTimeout)
	}
	u := rd.readDL.Load()
	if u != 0 && time.Now().UnixNano() >= u {
		return err
	}
	rd.armed = false
	var dl time.Time
	if u != 0 {
		dl = time.Unix(0, u)
	}
	c.conn.SetReadDeadline(dl)
	return c.boundMessage()
}

// messageTimeout is the error of a message not complete after t
// (Options.MessageTimeout).
func messageTimeout(t time.Duration) error {
	return &ProtocolError{Code: StatusPolicyViolation, Reason: "message not complete after " + t.String(),
		err: os.ErrDeadlineExceeded}
}
