package netpoll

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gustws/gust/internal/testkit"
	"github.com/stretchr/testify/require"
)

// An Under carries crypto/tls: these check that a *tls.Conn made over one
// goes on over a Sock after Adopt, reading without waiting and keeping
// what the socket does not take.

func bigOne() *big.Int { return big.NewInt(1) }

var testCert = sync.OnceValue(func() tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{SerialNumber: bigOne(), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
})

// tlsPair returns a server *tls.Conn over an Under, its handshake done and
// the Under moved to a registered Sock, and the client's *tls.Conn over the
// TCP connection at the other end, through a tap.
func tlsPair(t *testing.T) (server *tls.Conn, u *Under, s *Sock, client *tls.Conn, tp *tap) {
	t.Helper()
	a, b := testkit.TCPPair(t)
	a.SetWriteBuffer(16 << 10) // so that 1 MiB fills the socket
	b.SetReadBuffer(16 << 10)
	u = Wrap(a)
	server = tls.Server(u, &tls.Config{Certificates: []tls.Certificate{testCert()}})
	tp = &tap{TCPConn: b}
	client = tls.Client(tp, &tls.Config{InsecureSkipVerify: true})
	done := make(chan error, 1)
	go func() { done <- client.Handshake() }()
	server.SetDeadline(time.Now().Add(5 * time.Second))
	require.NoError(t, server.Handshake())
	require.NoError(t, <-done)
	server.SetDeadline(time.Time{})
	s, _ = adoptUnder(t, u)
	return server, u, s, client, tp
}

// tap is the client's connection: what the client writes goes to the
// socket, or to divert when it is set.
type tap struct {
	*net.TCPConn
	divert *bytes.Buffer
}

func (tp *tap) Write(p []byte) (int, error) {
	if tp.divert != nil {
		return tp.divert.Write(p)
	}
	return tp.TCPConn.Write(p)
}

// sealed returns the records client's Write of p makes, diverted from the
// socket.
func sealed(t *testing.T, client *tls.Conn, tp *tap, p []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	tp.divert = &b
	defer func() { tp.divert = nil }()
	_, err := client.Write(p)
	require.NoError(t, err)
	return b.Bytes()
}

// adoptUnder moves u to a Sock of its own for a new owner.
func adoptUnder(t *testing.T, u *Under) (*Sock, *owner) {
	t.Helper()
	o := new(owner)
	require.NoError(t, u.Adopt(func(s *Sock) error {
		o.s = s
		return s.Register(o)
	}))
	s := u.Sock()
	t.Cleanup(func() {
		s.Remove(o)
		u.Close()
	})
	return s, o
}

func TestUnderBeforeAdoptIsTheWrappedConn(t *testing.T) {
	a, b := testkit.TCPPair(t)
	u := Wrap(a)
	require.Nil(t, u.Sock())
	require.Equal(t, a.LocalAddr(), u.LocalAddr())
	require.Equal(t, a.RemoteAddr(), u.RemoteAddr())
	_, err := u.Write([]byte("hi"))
	require.NoError(t, err)
	p := make([]byte, 2)
	_, err = io.ReadFull(b, p)
	require.NoError(t, err)
	require.Equal(t, "hi", string(p))
	require.NoError(t, u.SetReadDeadline(time.Now().Add(10*time.Millisecond)))
	_, err = u.Read(p)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, u.SetDeadline(time.Time{}))
	require.NoError(t, u.SetWriteDeadline(time.Time{}))
	require.NoError(t, u.Close())
	_, err = b.Read(p)
	require.ErrorIs(t, err, io.EOF)
}

func TestListenerWrapsWhatItAccepts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := Listener(ln)
	defer l.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	nc, err := l.Accept()
	require.NoError(t, err)
	defer nc.Close()
	u, ok := nc.(*Under)
	require.True(t, ok)
	_, ok = u.nc.(*net.TCPConn)
	require.True(t, ok)
	require.Equal(t, u, UnderOf(tls.Server(nc, &tls.Config{})))
	require.Nil(t, UnderOf(u.nc))
	l.Close()
	_, err = l.Accept()
	require.Error(t, err)
}

// A read that may not wait finds nothing, then the part of a record,
// which crypto/tls keeps; the rest of it brings the message. Records that
// came together come one Read at a time, and only then does it find
// nothing again.
func TestUnderReadsWithoutWaiting(t *testing.T) {
	server, u, _, client, raw := tlsPair(t)
	p := make([]byte, 64<<10)
	n, again, err := u.ReadThrough(server, p, true)
	require.NoError(t, err)
	require.True(t, again)
	require.Zero(t, n)

	// One record, sent in two pieces: crypto/tls seals it over a tap.
	rec := sealed(t, client, raw, []byte("hello, record"))
	_, err = raw.Write(rec[:7])
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, again, err = u.ReadThrough(server, p, true)
		require.NoError(t, err)
		return again && !u.drained
	}, time.Second, time.Millisecond, "the piece is read, and kept by crypto/tls")
	_, err = raw.Write(rec[7:])
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, again, err = u.ReadThrough(server, p, true)
		require.NoError(t, err)
		return !again
	}, time.Second, time.Millisecond)
	require.Equal(t, "hello, record", string(p[:n]))

	// Three records in one write: three reads, then nothing.
	var three []byte
	for _, m := range []string{"one", "two", "three"} {
		three = append(three, sealed(t, client, raw, []byte(m))...)
	}
	_, err = raw.Write(three)
	require.NoError(t, err)
	var got []string
	require.Eventually(t, func() bool {
		n, again, err = u.ReadThrough(server, p, true)
		require.NoError(t, err)
		if !again {
			got = append(got, string(p[:n]))
		}
		return len(got) == 3
	}, time.Second, time.Millisecond)
	require.Equal(t, []string{"one", "two", "three"}, got)
	_, again, err = u.ReadThrough(server, p, true)
	require.NoError(t, err)
	require.True(t, again)

	// A read that may wait waits, under the read deadline.
	go func() {
		time.Sleep(20 * time.Millisecond)
		client.Write([]byte("late"))
	}()
	n, again, err = u.ReadThrough(server, p, false)
	require.NoError(t, err)
	require.False(t, again)
	require.Equal(t, "late", string(p[:n]))
	server.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, _, err = u.ReadThrough(server, p, false)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	server.SetReadDeadline(time.Time{})
	_, again, err = u.ReadThrough(server, p, true)
	require.NoError(t, err, "a deadline that passed is not sticky in crypto/tls")
	require.True(t, again)

	// The peer's end.
	client.Close()
	require.Eventually(t, func() bool {
		_, again, err = u.ReadThrough(server, p, true)
		return !again
	}, time.Second, time.Millisecond)
	require.ErrorIs(t, err, io.EOF)
}

// With try set, a write takes what the socket does not, and says so
// (Pending); a write that may wait first writes what was kept, then its
// own, and the peer reads it all in order; one the peer does not read for
// ends at the write deadline, with arm called before it waits.
func TestUnderKeepsWhatTheSocketDoesNotTake(t *testing.T) {
	server, u, s, client, _ := tlsPair(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: more than the socket buffers take
	n, armed, err := u.WriteThrough(server, big, true, nil)
	require.NoError(t, err)
	require.False(t, armed)
	require.Equal(t, len(big), n)
	require.True(t, u.Pending(), "the socket took part of it")
	n, _, err = u.WriteThrough(server, []byte("more"), true, nil)
	require.NoError(t, err)
	require.Zero(t, n, "nothing taken while writes are kept")

	var got bytes.Buffer
	read := make(chan error, 1)
	go func() {
		_, err := io.CopyN(&got, client, int64(len(big)+len("after")))
		read <- err
	}()
	arms := 0
	n, _, err = u.WriteThrough(server, []byte("after"), false, func() bool { arms++; return false })
	require.NoError(t, err)
	require.Equal(t, len("after"), n)
	require.False(t, u.Pending())
	require.NoError(t, <-read)
	require.Equal(t, append(big, "after"...), got.Bytes())

	// Nobody reads now: the write waits until its deadline, armed once.
	n, _, err = u.WriteThrough(server, big, true, nil)
	require.NoError(t, err)
	require.Equal(t, len(big), n)
	armed = false
	_, armed, err = u.WriteThrough(server, big, false, func() bool {
		s.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		return true
	})
	require.True(t, armed)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
}

// Close writes what the socket takes of what was kept, the close_notify
// among it: the peer reads its end as io.EOF, not a cut.
func TestUnderCloseWritesTheCloseNotify(t *testing.T) {
	server, u, _, client, _ := tlsPair(t)
	_, _, err := u.WriteThrough(server, []byte("bye"), false, nil)
	require.NoError(t, err)
	require.NoError(t, server.Close())
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(client)
	require.NoError(t, err)
	require.Equal(t, "bye", string(got))
	_, err = u.Write([]byte("x"))
	require.Error(t, err)
}

// When the Sock cannot be registered, the Under stays on the connection it
// wraps, which still works; once adopted, the wrapped connection is closed.
func TestUnderAdoptFailsBackToTheWrappedConn(t *testing.T) {
	a, b := testkit.TCPPair(t)
	u := Wrap(a)
	before := openSockets(t)
	refused := errors.New("refused")
	require.ErrorIs(t, u.Adopt(func(*Sock) error { return refused }), refused)
	require.Nil(t, u.Sock())
	require.Equal(t, before, openSockets(t), "the duplicate is closed")
	_, err := u.Write([]byte("still"))
	require.NoError(t, err)
	p := make([]byte, 5)
	_, err = io.ReadFull(b, p)
	require.NoError(t, err)
	require.Equal(t, "still", string(p))

	o := new(owner)
	require.NoError(t, u.Adopt(func(s *Sock) error { o.s = s; return s.Register(o) }))
	t.Cleanup(func() { u.Sock().Remove(o); u.Close() })
	require.Equal(t, before, openSockets(t), "the duplicate replaces the wrapped descriptor")
	require.Nil(t, u.nc)
	_, err = u.Write([]byte("moved"))
	require.NoError(t, err)
	_, err = io.ReadFull(b, p)
	require.NoError(t, err)
	require.Equal(t, "moved", string(p))

	// A connection that is not a socket cannot be adopted.
	x, _ := net.Pipe()
	require.ErrorIs(t, Wrap(x).Adopt(func(*Sock) error { return nil }), ErrNotSocket)
}
