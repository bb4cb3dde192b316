package gust

import (
	"bufio"
	"io"
	"sync"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/deflate"
	"github.com/gustws/gust/internal/mask"
)

// msgStream is the state of a message streamed to OnMessage
// (Options.StreamThreshold), read as its frames arrive so that it is never
// held whole; it lives on the read goroutine.
type msgStream struct {
	c      *Conn
	prefix []byte // what was buffered before the message was streamed, not yet read

	// the frame being read
	remaining int64 // payload bytes not yet read
	fin       bool
	key       [4]byte
	pos       int

	wire     int64 // the message's payload bytes announced so far, for the size limit
	text     bool  // check UTF-8 of the payload (an uncompressed text message)
	err      error // sticky: the stream, and then the connection, end with it
	rawDone  bool  // the last frame's payload has been read
	tailSent int   // bytes of deflate.Tail given to the inflater

	// a compressed message
	fr       io.ReadCloser // from deflate.State.Reader
	br       *bufio.Reader
	out      int64 // inflated bytes so far
	checkOut bool  // check UTF-8 of the inflated bytes
}

// streamReaders buffer the compressed bytes between the frames and flate,
// which reads a byte at a time.
var streamReaders sync.Pool

const streamReaderSize = 32 << 10

// streamMessage hands the message in progress, whose frame header was just
// read, to OnMessage on the read goroutine (even with Options.Parallel).
// What the handler leaves unread is discarded afterwards, so that the next
// message starts on a frame boundary and the inflater's window stays in step.
func (rd *readState) streamMessage(fin bool, length int64, key [4]byte) error {
	c := rd.c
	rd.userReads = true // its reads wait, in netpoll mode too
	defer func() { rd.userReads = false }()
	sm := &streamedMessage{Message: Message{Opcode: rd.op, streamed: true},
		st: msgStream{c: c, remaining: length, fin: fin, key: key, wire: int64(rd.n) + length}}
	m, s := &sm.Message, &sm.st
	if rd.msg != nil {
		s.prefix = (*rd.msg)[:rd.n]
	}
	checkText := rd.op == OpText && !c.cfg.SkipUTF8Validation
	if rd.compressed {
		s.checkOut = checkText
		if err := s.startInflate(); err != nil {
			return err
		}
	} else {
		s.text = checkText
	}
	if !c.closing.has(closeSent) { // the browser API drops messages that arrive while closing
		c.handler.OnMessage(c, m)
	}
	m.closed.Store(true)
	err := s.discard()
	if mt := c.cfg.Metrics; mt != nil && err == nil {
		payload := s.wire
		if s.fr != nil {
			payload = s.out
		}
		mt.Received(c, rd.op, int(payload), int(s.wire))
	}
	s.end()
	bufpool.Put(rd.msg)
	rd.msg, rd.op, rd.n = nil, 0, 0
	return err
}

// startInflate prepares the inflater, with the window of earlier messages.
func (s *msgStream) startInflate() error {
	s.br, _ = streamReaders.Get().(*bufio.Reader)
	if s.br == nil {
		s.br = bufio.NewReaderSize(s, streamReaderSize)
	} else {
		s.br.Reset(s)
	}
	var err error
	s.fr, err = s.c.deflate.Reader(s.br)
	return err
}

// end gives the stream's buffers back.
func (s *msgStream) end() {
	if s.fr != nil {
		deflate.PutReader(s.fr)
		s.br.Reset(nil)
		streamReaders.Put(s.br)
		s.fr, s.br = nil, nil
	}
}

// discard reads and checks what the handler left, returning the error that
// ends the connection, if any.
func (s *msgStream) discard() error {
	if s.err != nil {
		return s.err
	}
	buf := bufpool.Get(streamReaderSize)
	defer bufpool.Put(buf)
	for {
		if _, err := s.read(*buf); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// read reads the message's bytes, inflated if it is compressed.
func (s *msgStream) read(p []byte) (int, error) {
	if s.fr == nil {
		return s.readRaw(p)
	}
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.fr.Read(p)
	if s.err != nil { // from the frames under the inflater
		return 0, s.err
	}
	if n > 0 {
		s.out += int64(n)
		if s.out > s.c.cfg.maxMessageSize() {
			s.err = protocolError(StatusMessageTooBig, "message over the size limit once inflated")
			return 0, s.err
		}
		if s.checkOut && !s.c.rd.utf8.Feed(p[:n]) {
			s.err = protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
			return 0, s.err
		}
		s.c.deflate.Remember(p[:n])
	}
	switch err {
	case nil:
	case io.EOF:
		// The deflate data may end before the last frame: read and check
		// the rest before the handler sees the end, as for a whole message.
		var scratch [512]byte
		for !s.rawDone {
			if _, err := s.readRaw(scratch[:]); err != nil && err != io.EOF {
				return 0, err
			}
		}
		if s.checkOut && !s.c.rd.utf8.Complete() {
			s.err = protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
			return 0, s.err
		}
	default:
		s.err = protocolError(StatusInvalidFramePayloadData, "invalid deflate data")
		return 0, s.err
	}
	return n, err
}

// Read gives the inflater the compressed bytes, then deflate.Tail.
func (s *msgStream) Read(p []byte) (int, error) {
	if !s.rawDone {
		n, err := s.readRaw(p)
		if err != io.EOF {
			return n, err
		}
	}
	if s.tailSent == len(deflate.Tail) {
		return 0, io.EOF
	}
	n := copy(p, deflate.Tail[s.tailSent:])
	s.tailSent += n
	return n, nil
}

// readRaw reads the message's payload as it came on the wire (unmasked):
// the prefix, then its frames' payloads, handling control frames between.
func (s *msgStream) readRaw(p []byte) (int, error) {
	if len(s.prefix) > 0 {
		n := copy(p, s.prefix)
		s.prefix = s.prefix[n:]
		return n, nil
	}
	for s.remaining == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.fin {
			if !s.rawDone {
				s.rawDone = true
				if s.text && !s.c.rd.utf8.Complete() {
					s.err = protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
					return 0, s.err
				}
			}
			return 0, io.EOF
		}
		if err := s.nextFrame(); err != nil {
			s.err = err
			return 0, err
		}
	}
	if len(p) == 0 {
		return 0, nil
	}
	c := s.c
	rd := c.rd
	p = p[:min(int64(len(p)), s.remaining)]
	if rd.w == rd.r && len(p) >= c.cfg.ReadBufferSize/2 {
		// Large and nothing buffered: read straight into p.
		n, _, err := c.rd.read(p) // a handler's read waits: it never yields
		if err != nil {
			s.err = noEOF(err)
			return 0, s.err
		}
		p = p[:n]
		if c.server {
			s.pos = mask.Apply(p, s.key, s.pos)
		}
	} else {
		if rd.w == rd.r {
			if s.err = s.fill(); s.err != nil {
				return 0, s.err
			}
		}
		p = p[:min(len(p), rd.w-rd.r)]
		s.pos = unmask(c.server, p, (*rd.buf)[rd.r:rd.r+len(p)], s.key, s.pos)
		rd.r += len(p)
	}
	s.remaining -= int64(len(p))
	if s.text && !rd.utf8.Feed(p) {
		s.err = protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
		return 0, s.err
	}
	return len(p), nil
}

// fill reads more into the read buffer; a handler's read waits, never yields.
func (s *msgStream) fill() error {
	_, err := s.c.rd.fill()
	return noEOF(err)
}

// nextFrame reads frames up to the message's next data frame, handling the
// control frames before it; a close frame ends the stream with its *CloseError.
func (s *msgStream) nextFrame() error {
	c := s.c
	rd := c.rd
	h := &frameHeader{}
	for {
		var b []byte
		if rd.buf != nil {
			b = (*rd.buf)[rd.r:rd.w]
		}
		n, err := parseFrameHeader(b, h, c.server, c.deflate != nil)
		if err != nil {
			return err
		}
		if n > 0 {
			rd.r += n
			break
		}
		if err := s.fill(); err != nil {
			return err
		}
	}
	if h.Op.isControl() {
		for rd.w-rd.r < int(h.Length) {
			if err := s.fill(); err != nil {
				return err
			}
		}
		return c.rd.control(h)
	}
	if h.Op != opContinuation {
		return protocolError(StatusProtocolError, "new message inside a fragmented message")
	}
	if err := c.rd.countEmpty(h); err != nil {
		return err
	}
	if h.Length > c.cfg.wireLimit(s.fr != nil)-s.wire {
		return protocolError(StatusMessageTooBig, "message over the size limit")
	}
	s.wire += h.Length
	s.remaining, s.fin, s.key, s.pos = h.Length, h.Fin, h.Key, 0
	return nil
}
