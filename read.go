package gust

import (
	"io"
	"sync/atomic"

	"github.com/gustws/gust/internal/bufpool"
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

// waitingReadBufferSize bounds the read buffer of connections that cannot
// wait for bytes without one.
const waitingReadBufferSize = 8 << 10

// readState is the read side of a Conn, owned by the read goroutine.
type readState struct {
	c *Conn // whose read state it is: set by allocConn and takeRead

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

// frames feeds the parser (parse) what the transport reads until the
// connection ends or yields. It returns a *CloseError for the peer's
// close, a *ProtocolError for a violation (the caller sends the close
// frame), or the I/O error. A yield leaves the frame in progress in c.rd,
// where the next call resumes.
func (rd *readState) frames() (yield, error) {
	for {
		w, err := rd.parse()
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
			k, y, err = rd.read((*rd.msg)[rd.n:min(rd.end, len(*rd.msg))])
			rd.direct = uint32(k)
		} else {
			y, err = rd.fill()
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
// reads nothing itself: frames feeds it.
func (rd *readState) parse() (want, error) {
	c := rd.c
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
		if h.Op.isControl() {
			w, err = rd.parseControl(h)
		} else {
			w, err = rd.parseData(h)
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
func (rd *readState) parseControl(h *frameHeader) (want, error) {
	n := int(h.Length)
	switch {
	case rd.w-rd.r < n:
		return wantBytes, nil
	case h.Op == opClose && rd.loop:
		return wantEnd, nil
	}
	return 0, rd.control(h)
}

// control handles the control frame h, whose payload is buffered.
func (rd *readState) control(h *frameHeader) error {
	c := rd.c
	// Unmasked in place: the bytes are consumed, and stay put until the
	// next read from the socket, after the callback. An empty close frame
	// handed over from a loop has no buffer (serve shrinks it).
	p := []byte{}
	if rd.buf != nil {
		p = (*rd.buf)[rd.r : rd.r+int(h.Length)]
	}
	unmask(c.server, p, p, h.Key, 0)
	rd.r += len(p)
	switch h.Op {
	case opPing:
		rd.called = true
		c.handler.OnPing(c, p)
	case opPong:
		c.pings.Pong(p)
		rd.called = true
		c.handler.OnPong(c, p)
	case opClose:
		return rd.closeFrame(p)
	}
	return nil
}

// parseData takes a data frame's payload into the message being
// assembled, checking text as it arrives, and dispatches the message on its
// last frame. With Options.StreamThreshold set, a message that grows past
// it is handed to OnMessage as a stream instead (streamMessage), whose
// handler reads the rest: not on an event loop, since that waits.
func (rd *readState) parseData(h *frameHeader) (want, error) {
	c := rd.c
	if !rd.begun {
		if err := rd.beginData(h, c.cfg); err != nil {
			return 0, err
		}
	}
	if rd.stream {
		if rd.loop {
			return wantGoroutine, nil
		}
		return 0, rd.streamMessage(h.Fin, h.Length, h.Key)
	}
	if w, err := rd.parsePayload(h, c.server, c.cfg); w != 0 || err != nil {
		return w, err
	}
	if !h.Fin {
		return 0, nil
	}
	return rd.endMessage(h.Key)
}

// noEOF turns an EOF in the middle of a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// fill reads more bytes into the read buffer, making room at its end first.
func (rd *readState) fill() (yield, error) {
	c := rd.c
	if rd.r == rd.w && c.direct() {
		// Drained: wait for bytes without a buffer (the transport takes one
		// once they have come).
		rd.release()
		rd.putSlab()
		_, y, err := rd.read(nil)
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
	n, y, err := rd.read(b[rd.w:])
	rd.w += n
	return y, err
}

// read reads from the connection into p (or, when p is nil, into a fresh
// pooled buffer that becomes the read buffer), flushing corked writes
// first, so that every write made while dispatching leaves before the read
// waits.
func (rd *readState) read(p []byte) (int, yield, error) {
	if y, err := rd.c.wr.uncork(); y != goOn || err != nil {
		return 0, y, err
	}
	if err := rd.boundMessage(); err != nil {
		return 0, goOn, err
	}
	return rd.readSome(p)
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
func (rd *readState) readSome(dst []byte) (int, yield, error) {
	c := rd.c
	if rd.loop && !rd.drained && rd.work >= loopWorkBudget {
		return 0, handOff, nil
	}
	if hb := c.hb; hb != nil {
		hb.seen.Store(c.cfg.wheel.Now()) // for the heartbeat: silent from now until bytes arrive
	}
	if rd.loop && rd.drained {
		return 0, park, nil
	}
	try := rd.mayPark()
	for {
		buf, n, again, err := c.tr.read(dst, try)
		switch {
		case again:
			return 0, park, nil
		case err != nil:
			if err = rd.overdue(err); err != nil {
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
		if !c.wr.cork(drainedBatch(n, size)) {
			return n, handOff, nil
		}
		return n, goOn, nil
	}
}

// mayPark reports whether a read must not wait but park the connection
// when nothing has arrived: on an event loop, and in netpoll mode
// on any goroutine, except for a streamed message, whose handler reads
// from its callback.
func (rd *readState) mayPark() bool {
	return rd.loop || (!rd.userReads && rd.c.polled)
}
