package gust

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust/internal/testkit"
)

// A write, a Close or a Ping on the Conn OnRequest receives fails with an
// error that says the connection is not open yet (still net.ErrClosed for
// errors.Is), and a ReadLoop there logs a Warn record; the Conn then opens
// intact.
func TestMisuseInOnRequestIsNamed(t *testing.T) {
	t.Parallel()
	var logs testkit.Buffer
	h := newRecorder()
	errs := make(chan []error, 1)
	addr := serveUpgrader(t, h, &Options{Logger: newLogger(&logs)}, func(u *Upgrader) {
		u.OnRequest = func(r *http.Request, _ http.Header, c *Conn) error {
			_, perr := c.Ping(context.Background())
			errs <- []error{
				c.WriteString("early"),
				c.WriteMessage(OpBinary, nil),
				c.WriteAsync(OpText, []byte("early"), nil),
				c.WritePing(nil),
				perr,
				c.Close(StatusNormalClosure, ""),
				c.CloseNow(),
			}
			c.ReadLoop()
			return nil
		}
	})
	c := dialRaw(t, addr, nil)
	for i, err := range <-errs {
		require.ErrorIs(t, err, net.ErrClosed, "call %d", i)
		require.ErrorIs(t, err, errNotOpen, "call %d", i)
		require.Contains(t, err.Error(), "not open yet", "call %d", i)
	}
	require.Contains(t, logs.String(), "level=WARN")
	require.Contains(t, logs.String(), "ReadLoop called before the connection is open")

	sc := h.waitOpen(t)
	require.NoError(t, sc.WriteString("open"))
	c.expectMessage(OpText, []byte("open"))
	var zero Conn
	require.NotErrorIs(t, zero.WriteString("x"), errNotOpen, "a zero Conn is closed, not pending")
	require.ErrorIs(t, zero.WriteString("x"), net.ErrClosed)
}

// A second ReadLoop on a live connection returns at once and logs a Warn
// record that says why; one after the connection ended stays quiet.
func TestReadLoopTwiceWarns(t *testing.T) {
	t.Parallel()
	for _, netpoll := range []bool{false, true} {
		var logs testkit.Buffer
		h := newRecorder()
		returned := make(chan time.Duration, 1)
		h.open = func(c *Conn) {
			start := time.Now()
			c.ReadLoop()
			returned <- time.Since(start)
		}
		addr := startUpgrader(t, h, &Options{Netpoll: netpoll, Logger: newLogger(&logs)})
		c := dialRaw(t, addr, nil)
		sc := h.waitOpen(t)
		require.Less(t, <-returned, time.Second)
		require.Contains(t, logs.String(), "level=WARN")
		require.Contains(t, logs.String(), "ReadLoop called while it runs")
		c.nc.Close()
		h.waitClose(t)
		before := logs.String()
		sc.ReadLoop()
		require.Equal(t, before, logs.String(), "quiet once the connection has ended")
	}
}
