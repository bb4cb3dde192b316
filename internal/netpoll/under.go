package netpoll

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gustws/gust/internal/bufpool"
)

// Under is the net.Conn under a protocol layer gust does not write itself,
// crypto/tls: a *tls.Conn keeps the net.Conn it was made over for its life,
// so netpoll mode cannot swap the socket from above as it does for a plain
// connection. Made over an Under (Listener), the layer reads and writes the
// connection it wraps, a *net.TCPConn, until Adopt gives the Under a Sock:
// from then on its calls reach the Sock, without the layer noticing, and
// never wait unless asked:
//
//   - a read during ReadThrough with try set that finds nothing to read
//     fails with ErrWouldBlock, which crypto/tls takes as temporary: it
//     keeps the part of a record it has, and reads on at its next call;
//   - a write takes p whole: what the socket does not take at once is kept,
//     in order, for the next WriteThrough (or Close) to write.
//
// Before or after Adopt, the Under follows the record framing of what the
// layer reads (InRecord), and asks a Bounder before each read during a
// ReadThrough: crypto/tls holds a record that has begun until its rest
// comes, inside a Read that would otherwise wait for it for ever.
type Under struct {
	nc net.Conn
	s  atomic.Pointer[Sock] // set by Adopt

	// The reader's.
	try     bool    // during ReadThrough: reads do not wait
	through bool    // ReadThrough is reading: ask bound
	drained bool    // the last read took all there was, and no event came since (the caller parks)
	rec     records // what the layer has read, in records
	bound   Bounder // see SetBounder

	mu   sync.Mutex
	out  *[]byte // kept writes, not yet on the socket; nil when none
	hold bool    // WriteThrough is writing through the layer: keep every write, it flushes them together
}

// A Bounder bounds the reads an Under makes during a ReadThrough: Under
// calls BoundRead before each, on the reader's goroutine, and an error it
// returns is the read's (the layer returns it). It may set a read deadline
// for the read to come, as the record in progress (InRecord) needs.
type Bounder interface{ BoundRead() error }

// ErrWouldBlock is a read's error when nothing has arrived during a
// ReadThrough with try set: a net.Error whose Timeout and Temporary are
// true, which crypto/tls does not make sticky.
var ErrWouldBlock net.Error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "netpoll: nothing to read yet" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

// writeChunk bounds what one write through the layer gives it at a time
// when it may wait: the Under then keeps at most this much, sealed.
const writeChunk = 64 << 10

// Listener wraps ln so that each connection it accepts is an Under, which
// a layer made over it (tls.NewListener(Listener(ln), cfg)) lets netpoll
// mode move to a Sock.
func Listener(ln net.Listener) net.Listener { return listener{ln} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(nc), nil
}

// Wrap returns an Under over nc.
func Wrap(nc net.Conn) *Under { return &Under{nc: nc} }

// UnderOf returns the Under a layer (one with a NetConn method, as
// *tls.Conn has) was made over, or nil.
func UnderOf(nc net.Conn) *Under {
	if l, ok := nc.(interface{ NetConn() net.Conn }); ok {
		u, _ := l.NetConn().(*Under)
		return u
	}
	return nil
}

// Adopt moves u from the connection it wraps to a Sock with a duplicate of
// its descriptor (as Adopt does), which register registers with its loop,
// and closes that connection. On failure u stays on it. Nothing may use u
// meanwhile.
func (u *Under) Adopt(register func(*Sock) error) error {
	s, err := Adopt(u.nc)
	if err != nil {
		return err
	}
	u.s.Store(s) // before register: the loop may find s through its owner at once
	if err := register(s); err != nil {
		u.s.Store(nil)
		s.Close()
		return err
	}
	u.nc.Close()
	u.nc = nil // nothing reads it once s is set; the *net.TCPConn goes
	return nil
}

// Sock returns the Sock u was moved to, or nil.
func (u *Under) Sock() *Sock { return u.s.Load() }

// SetBounder sets the Bounder of the reads during ReadThrough; nil for none.
// Nothing may read through u meanwhile.
func (u *Under) SetBounder(b Bounder) { u.bound = b }

// InRecord reports whether the bytes the layer has read stop inside a TLS
// record: it holds part of one, and needs the rest before it gives
// anything more. Only the reader may ask.
func (u *Under) InRecord() bool { return u.rec.begun() }

// ReadThrough reads into p through r, the layer over u; with try set, u's
// reads do not wait, and again reports that the layer needs bytes that
// have not arrived: it holds no record whole, and the caller may park.
func (u *Under) ReadThrough(r io.Reader, p []byte, try bool) (n int, again bool, err error) {
	u.try, u.through = try, true
	if !try {
		u.drained = false
	}
	n, err = r.Read(p)
	u.try, u.through = false, false
	switch {
	case n > 0:
		return n, false, nil // an error comes again at the next read
	case try && err == ErrWouldBlock:
		return 0, true, nil
	}
	return 0, false, err
}

// Read reads from the wrapped connection, or from the Sock as ReadThrough
// asks: waiting for bytes, or failing with ErrWouldBlock when there are
// none. A read that came short of p took all there was: the next read
// that may not wait fails at once, since bytes that came since have left
// an event that resumes the caller once it parks.
func (u *Under) Read(p []byte) (int, error) {
	if u.through && u.bound != nil {
		if err := u.bound.BoundRead(); err != nil {
			return 0, err
		}
	}
	s := u.s.Load()
	if s == nil {
		n, err := u.nc.Read(p)
		u.rec.add(p[:n])
		return n, err
	}
	if u.try && u.drained {
		u.drained = false
		return 0, ErrWouldBlock
	}
	n, again, err := s.ReadSome(p, u.try)
	switch {
	case again:
		return 0, ErrWouldBlock
	case err == io.EOF:
		return 0, io.EOF
	case err != nil:
		return 0, s.OpError("read", err)
	}
	u.rec.add(p[:n])
	u.drained = u.try && n < len(p) && !s.PeerEnded()
	return n, nil
}

// Write writes p to the wrapped connection, or takes it whole once moved:
// it writes what the socket takes at once, unless writes are kept already
// or WriteThrough holds them, and keeps the rest.
func (u *Under) Write(p []byte) (int, error) {
	s := u.s.Load()
	if s == nil {
		return u.nc.Write(p)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	if u.out == nil && !u.hold {
		var err error
		if n, _, err = s.WriteSome(p, true, nil); err != nil {
			return n, s.OpError("write", err)
		}
	}
	if n < len(p) {
		u.keepLocked(p[n:])
	}
	return len(p), nil
}

// keepLocked appends p to the kept writes.
func (u *Under) keepLocked(p []byte) { u.out = bufpool.Append(u.out, p) }

// Pending reports whether u keeps writes the socket has not taken.
func (u *Under) Pending() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.out != nil
}

// WriteThrough writes p through w, the layer over u, and then what u keeps,
// in one system call where the socket takes it. With try set it writes
// what the socket takes at once and keeps the rest (Pending tells); it
// takes nothing (n is 0) when u keeps writes already, which go first.
// Without try it writes all of it, a chunk of p at a time, waiting for room
// under the write deadline; arm is called before the first wait, as
// Sock.WriteSome's is.
func (u *Under) WriteThrough(w io.Writer, p []byte, try bool, arm func() bool) (n int, armed bool, err error) {
	s := u.s.Load()
	if try {
		if u.Pending() {
			return 0, false, nil
		}
		n, err = u.writeHeld(w, p)
		if err == nil {
			_, err = u.flush(s, true, nil)
		}
		return n, false, err
	}
	for {
		a, err := u.flush(s, false, arm)
		armed = armed || a
		if err != nil || n == len(p) {
			return n, armed, err
		}
		k, err := u.writeHeld(w, p[n:n+min(len(p)-n, writeChunk)])
		n += k
		if err != nil {
			return n, armed, err
		}
	}
}

// writeHeld writes p through w, keeping every write the layer makes.
func (u *Under) writeHeld(w io.Writer, p []byte) (int, error) {
	u.mu.Lock()
	u.hold = true
	u.mu.Unlock()
	n, err := w.Write(p)
	u.mu.Lock()
	u.hold = false
	u.mu.Unlock()
	return n, err
}

// flush writes what u keeps: what the socket takes at once with try set,
// else all of it, waiting on s as WriteSome does. Writes the layer makes
// meanwhile are kept behind it.
func (u *Under) flush(s *Sock, try bool, arm func() bool) (armed bool, err error) {
	var werr error
	_, err = s.do(dirWrite, try, func(fd int) bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		if u.out == nil {
			return true
		}
		n, again, err := WriteFD(fd, *u.out)
		if err != nil {
			werr = err
			return true
		}
		if !again {
			bufpool.Put(u.out)
			u.out = nil
			return true
		}
		k := copy(*u.out, (*u.out)[n:])
		*u.out = (*u.out)[:k]
		if !try && !armed && arm != nil {
			armed = arm()
		}
		return false
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		err = s.OpError("write", err)
	}
	return armed, err
}

// Close closes the connection: once moved, it first writes what the socket
// takes of the kept writes (a TLS close_notify among them), without
// waiting.
func (u *Under) Close() error {
	s := u.s.Load()
	if s == nil {
		return u.nc.Close()
	}
	u.flush(s, true, nil)
	u.mu.Lock()
	bufpool.Put(u.out)
	u.out = nil
	u.mu.Unlock()
	return s.Close()
}

// LocalAddr returns the local address.
func (u *Under) LocalAddr() net.Addr {
	if s := u.s.Load(); s != nil {
		return s.LocalAddr()
	}
	return u.nc.LocalAddr()
}

// RemoteAddr returns the peer's address.
func (u *Under) RemoteAddr() net.Addr {
	if s := u.s.Load(); s != nil {
		return s.RemoteAddr()
	}
	return u.nc.RemoteAddr()
}

// SetDeadline sets both deadlines.
func (u *Under) SetDeadline(t time.Time) error {
	if s := u.s.Load(); s != nil {
		return s.SetDeadline(t)
	}
	return u.nc.SetDeadline(t)
}

// SetReadDeadline sets the read deadline.
func (u *Under) SetReadDeadline(t time.Time) error {
	if s := u.s.Load(); s != nil {
		return s.SetReadDeadline(t)
	}
	return u.nc.SetReadDeadline(t)
}

// SetWriteDeadline sets the write deadline.
func (u *Under) SetWriteDeadline(t time.Time) error {
	if s := u.s.Load(); s != nil {
		return s.SetWriteDeadline(t)
	}
	return u.nc.SetWriteDeadline(t)
}
