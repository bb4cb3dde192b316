package gust

import (
	"errors"
	"os"
	"time"
)

// MessageTimeout: a frame or message in progress, or a TLS record
// crypto/tls holds part of, is bounded from the first time it waited for
// bytes; in goroutine mode by the socket's read deadline, in netpoll mode
// by a wake-up of the parked connection.

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
func (rd *readState) messageLeft() (left time.Duration, ok bool) {
	c := rd.c
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
// its own Read (tlsTransport.BoundRead). In goroutine mode the socket's read deadline
// does; a connection parked in netpoll mode is woken instead (park). The
// bound is left in place when the message ends, so that messages which
// keep coming do not set it at each read: one that fires for an earlier
// message is set again (overdue).
func (rd *readState) boundMessage() error {
	c := rd.c
	left, ok := rd.messageLeft()
	switch {
	case !ok:
		return nil
	case left <= 0:
		return messageTimeout(c.cfg.MessageTimeout)
	}
	if !rd.armed && !c.polled {
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
func (rd *readState) overdue(err error) error {
	c := rd.c
	if !rd.armed || !errors.Is(err, os.ErrDeadlineExceeded) || c.polled {
		return err
	}
	if left, ok := rd.messageLeft(); ok && left <= 0 {
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
	return rd.boundMessage()
}

// messageTimeout is the error of a message not complete after t
// (Options.MessageTimeout).
func messageTimeout(t time.Duration) error {
	return &ProtocolError{Code: StatusPolicyViolation, Reason: "message not complete after " + t.String(),
		err: os.ErrDeadlineExceeded}
}
