package main

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
)

func TestValidSender(t *testing.T) {
	for name, want := range map[string]bool{
		"s12":                     true,
		"Zoë 7":                   true,
		strings.Repeat("x", 64):   true,
		"":                        false,
		strings.Repeat("x", 65):   false,
		"a/b":                     false, // name+"/"+id must name one sender's message
		"nul\x00":                 false,
		"line\nbreak":             false,
		"rtl\u202eoverride":       false,
		string([]byte{0xff, 'a'}): false,
	} {
		require.Equal(t, want, validSender(name), "%q", name)
	}
}

// peer is a test client of an instance: what it gets, and why it closed.
type peer struct {
	gust.BuiltinEventHandler
	frames chan frame
	closed chan error
}

func (p *peer) OnMessage(_ *gust.Conn, m *gust.Message) {
	var f frame
	err := json.Unmarshal(m.Data, &f)
	m.Close()
	if err == nil {
		p.frames <- f
	}
}

func (p *peer) OnClose(_ *gust.Conn, err error) { p.closed <- err }

// An instance publishes a sender's message once per id however many times
// it comes, acknowledges each copy with the position of the one stored,
// and closes with 1008 a connection whose sender name or message is junk.
func TestInstanceSenders(t *testing.T) {
	h, err := hub.New(&hub.Options{Broker: hub.NewMemoryHistory(nil)})
	require.NoError(t, err)
	defer h.Close()
	sub := &subscriber{hub: h}
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: h.Wrap(sub), OnRequest: parseRequest}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, srv.Shutdown(ctx))
		<-served
	}()

	dial := func(query string) (*gust.Conn, *peer) {
		p := &peer{frames: make(chan frame, 64), closed: make(chan error, 1)}
		c, _, err := gust.Dial(context.Background(), "ws://"+ln.Addr().String()+"/ws?topic=t0&since="+query, p, nil)
		require.NoError(t, err)
		go c.ReadLoop()
		return c, p
	}
	closedWith := func(p *peer) gust.StatusCode {
		select {
		case err := <-p.closed:
			return gust.CloseStatus(err)
		case <-time.After(10 * time.Second):
			t.Fatal("not closed")
			return 0
		}
	}
	for _, name := range []string{"", "a/b", strings.Repeat("x", 65), "nul\x00"} {
		_, p := dial("&sender=" + url.QueryEscape(name))
		require.Equal(t, gust.StatusPolicyViolation, closedWith(p), "sender %q", name)
	}
	c, p := dial("") // no sender: it may only receive
	require.NoError(t, c.WriteMessage(gust.OpText, []byte(`{"id":"1","n":1,"at":1,"a":1}`)))
	require.Equal(t, gust.StatusPolicyViolation, closedWith(p), "a message without a sender")

	c, p = dial("&sender=s1")
	var seen []frame // every frame got, in order
	next := func(what string, ok func(f frame) bool) frame {
		for i, f := range seen {
			if ok(f) {
				seen = append(seen[:i:i], seen[i+1:]...)
				return f
			}
		}
		for {
			select {
			case f := <-p.frames:
				if ok(f) {
					return f
				}
				seen = append(seen, f)
			case err := <-p.closed:
				t.Fatalf("closed waiting for %s: %v", what, err)
			case <-time.After(10 * time.Second):
				t.Fatalf("no %s", what)
			}
		}
	}
	ackOf := func(id string) frame {
		return next("the ack of "+id, func(f frame) bool { return f.Ack != nil && *f.Ack == id })
	}
	next("the recovered notice", func(f frame) bool { return f.Recovered != nil })
	for _, m := range []string{`{"id":"1","n":1,"at":5,"a":1}`, `{"id":"1","n":1,"at":5,"a":2}`, `{"id":"2","n":2,"at":6,"a":1}`} {
		require.NoError(t, c.WriteMessage(gust.OpText, []byte(m)))
	}
	first, again, second := ackOf("1"), ackOf("1"), ackOf("2")
	require.NotZero(t, first.Seq)
	require.Equal(t, first.Seq, again.Seq, "the copy is acknowledged at the first one's position")
	require.Equal(t, first.Epoch, again.Epoch)
	require.Greater(t, second.Seq, first.Seq)

	// What the topic got: each once, in order, from s1, the first attempt
	// of #1 (a second copy would come before #2).
	message := func(f frame) bool { return f.Topic == "t0" && f.Data.N > 0 }
	got := []frame{next("#1", message), next("#2", message)}
	require.Equal(t, []uint64{1, 2}, []uint64{got[0].Data.N, got[1].Data.N})
	require.Equal(t, []uint64{first.Seq, second.Seq}, []uint64{got[0].Seq, got[1].Seq})
	require.Equal(t, "s1", got[0].Data.From)
	require.Equal(t, uint64(1), got[0].Data.Attempt)
	require.Equal(t, int64(5), got[0].Data.At)

	require.NoError(t, c.WriteMessage(gust.OpText, []byte(`not JSON`)))
	require.Equal(t, gust.StatusPolicyViolation, closedWith(p), "junk from a sender")
	st := sub.sent()
	require.Equal(t, sentStats{Received: 3, Acked: 3, Refused: 6}, st, "4 names, a message without a sender, junk")
}
