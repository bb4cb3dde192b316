package hub_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gustws/gust"
	"github.com/gustws/gust/hub"
	"github.com/gustws/gust/internal/testkit"
)

// hubServer runs a gust.Server on loopback whose handler is wrapped by hub.
// Clients send "join:T" and "leave:T" to change their topics, and "say:T:text"
// to publish text to T's other subscribers; the server answers "ok:join:T"
// (and so on) once it is done. sndbuf, when > 0, sets the send
// buffer of every accepted socket (small buffers make a stalled client
// stall the server's writes sooner).
type hubServer struct {
	url    string
	hub    *hub.Hub
	mu     sync.Mutex
	closed map[string]error // remote address -> OnClose's error
	done   chan string      // remote addresses, as OnClose runs
}

type hubHandler struct {
	gust.BuiltinEventHandler
	s         *hubServer
	autoJoin  string        // topic every connection joins in OnOpen
	autoSince *hub.Position // if set, it joins with SubscribeSince
}

func (h hubHandler) OnOpen(c *gust.Conn) {
	switch {
	case h.autoJoin != "" && h.autoSince != nil:
		if err := h.s.hub.SubscribeSince(c, h.autoJoin, *h.autoSince); err != nil {
			panic(err)
		}
	case h.autoJoin != "":
		if err := h.s.hub.Subscribe(c, h.autoJoin); err != nil {
			panic(err)
		}
	}
}

func (h hubHandler) OnMessage(c *gust.Conn, m *gust.Message) {
	defer m.Close()
	cmd, topic, _ := strings.Cut(string(m.Data), ":")
	switch cmd {
	case "join":
		if err := h.s.hub.Subscribe(c, topic); err != nil {
			c.WriteString("error:" + err.Error())
			return
		}
	case "leave":
		h.s.hub.Unsubscribe(c, topic)
	case "since": // since:T:EPOCH:N, SubscribeSince(T, {EPOCH, N})
		topic, at, _ := strings.Cut(topic, ":")
		pos, err := hub.ParsePosition(at)
		if err != nil {
			c.WriteString("error:" + err.Error())
			return
		}
		if err := h.s.hub.SubscribeSince(c, topic, pos); err != nil {
			c.WriteString("error:" + err.Error())
			return
		}
	case "say": // say:T:text, to T's other subscribers
		topic, text, _ := strings.Cut(topic, ":")
		if err := h.s.hub.PublishExcept(topic, gust.OpText, []byte(text), c); err != nil {
			c.WriteString("error:" + err.Error())
			return
		}
	default:
		return
	}
	c.WriteString("ok:" + string(m.Data))
}

func (h hubHandler) OnClose(c *gust.Conn, err error) {
	h.s.mu.Lock()
	h.s.closed[c.RemoteAddr().String()] = err
	h.s.mu.Unlock()
	h.s.done <- c.RemoteAddr().String()
}

type serverConfig struct {
	hub       *hub.Hub
	wrap      bool
	autoJoin  string
	autoSince *hub.Position
	opts      *gust.Options
	sndbuf    int
}

func startHubServer(t *testing.T, cfg serverConfig) *hubServer {
	t.Helper()
	s := &hubServer{hub: cfg.hub, closed: make(map[string]error), done: make(chan string, 1024)}
	var h gust.Event = hubHandler{s: s, autoJoin: cfg.autoJoin, autoSince: cfg.autoSince}
	if cfg.wrap {
		h = cfg.hub.Wrap(h)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: h}}
	if cfg.opts != nil {
		srv.Upgrader.Options = *cfg.opts
	}
	go srv.Serve(sndbufListener{ln, cfg.sndbuf})
	t.Cleanup(func() { srv.Close() })
	s.url = "ws://" + ln.Addr().String() + "/"
	return s
}

type sndbufListener struct {
	net.Listener
	size int
}

func (l sndbufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil && l.size > 0 {
		c.(*net.TCPConn).SetWriteBuffer(l.size)
	}
	return c, err
}

func (s *hubServer) closeErr(addr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed[addr]
}

// hubClient records what a client receives: text messages as strings, and
// the sequence numbers (first 8 bytes) of binary ones, checking that they
// increase.
type hubClient struct {
	gust.BuiltinEventHandler
	conn   *gust.Conn
	mu     sync.Mutex
	texts  []string
	seqs   []uint64
	badSeq error
	count  atomic.Int64
	acks   chan string
	closed chan error
}

func (c *hubClient) OnMessage(_ *gust.Conn, m *gust.Message) {
	defer m.Close()
	if m.Opcode == gust.OpText && strings.HasPrefix(string(m.Data), "ok:") {
		c.acks <- string(m.Data)
		return
	}
	c.mu.Lock()
	if m.Opcode == gust.OpText {
		c.texts = append(c.texts, string(m.Data))
	} else {
		seq := binary.BigEndian.Uint64(m.Data)
		if n := len(c.seqs); n > 0 && seq <= c.seqs[n-1] && c.badSeq == nil {
			c.badSeq = fmt.Errorf("message %d after %d", seq, c.seqs[n-1])
		}
		c.seqs = append(c.seqs, seq)
	}
	c.mu.Unlock()
	c.count.Add(1)
}

func (c *hubClient) OnClose(_ *gust.Conn, err error) { c.closed <- err }

func (c *hubClient) textsNow() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.texts...)
}

func (c *hubClient) seqsNow() ([]uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint64(nil), c.seqs...), c.badSeq
}

// dialHub connects a client; rcvbuf > 0 sets its socket's receive buffer;
// with read false the caller starts the read loop later (a stalled client).
func dialHub(t *testing.T, url string, rcvbuf int, compress, read bool) *hubClient {
	t.Helper()
	hc := &hubClient{acks: make(chan string, 16), closed: make(chan error, 1)}
	opts := &gust.DialOptions{Options: gust.Options{Compression: gust.CompressionOptions{Enabled: compress}}}
	if rcvbuf > 0 {
		opts.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err == nil {
				c.(*net.TCPConn).SetReadBuffer(rcvbuf)
			}
			return c, err
		}
	}
	c, _, err := gust.Dial(context.Background(), url, hc, opts)
	require.NoError(t, err)
	require.Equal(t, compress, c.Compressed())
	hc.conn = c
	if read {
		go c.ReadLoop()
	}
	t.Cleanup(func() {
		c.NetConn().Close()
		if !read {
			go c.ReadLoop() // ends at once: it reports the closed socket
		}
		<-hc.closed
	})
	return hc
}

// send sends a command and waits for the server's acknowledgement.
func (c *hubClient) send(t *testing.T, cmd string) {
	t.Helper()
	require.NoError(t, c.conn.WriteString(cmd))
	select {
	case ack := <-c.acks:
		require.Equal(t, "ok:"+cmd, ack)
	case <-time.After(5 * time.Second):
		t.Fatalf("no answer to %q", cmd)
	}
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestHubTopics(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			hb := new(hub.Hub) // the zero value is a local Hub
			defer hb.Close()
			opts := &gust.Options{Compression: gust.CompressionOptions{Enabled: true, Threshold: 1}}
			s := startHubServer(t, serverConfig{hub: hb, wrap: true, opts: opts})
			a := dialHub(t, s.url, 0, compress, true)
			b := dialHub(t, s.url, 0, compress, true)
			ab := dialHub(t, s.url, 0, compress, true)
			a.send(t, "join:a")
			b.send(t, "join:b")
			ab.send(t, "join:a")
			ab.send(t, "join:b")
			waitFor(t, "3 connections", 5*time.Second, func() bool { return hb.Stats().Connections == 3 })
			require.Equal(t, 2, hb.Stats().Topics)

			long := strings.Repeat("compressible text ", 100)
			require.NoError(t, hb.Publish("a", gust.OpText, []byte("to a")))
			require.NoError(t, hb.Publish("b", gust.OpText, []byte("to b")))
			require.NoError(t, hb.Publish("a", gust.OpText, []byte(long)))
			require.NoError(t, hb.Publish("nobody", gust.OpText, []byte("lost")))
			require.NoError(t, hb.PublishAll(gust.OpText, []byte("to all")))
			ab.send(t, "leave:a")
			require.NoError(t, hb.Publish("a", gust.OpText, []byte("to a again")))
			require.NoError(t, hb.PublishAll(gust.OpText, []byte("end")))

			last := func(c *hubClient) func() bool {
				return func() bool { m := c.textsNow(); return len(m) > 0 && m[len(m)-1] == "end" }
			}
			for _, c := range []*hubClient{a, b, ab} {
				waitFor(t, "end", 5*time.Second, last(c))
			}
			require.Equal(t, []string{"to a", long, "to all", "to a again", "end"}, a.textsNow())
			require.Equal(t, []string{"to b", "to all", "end"}, b.textsNow())
			require.Equal(t, []string{"to a", "to b", long, "to all", "end"}, ab.textsNow())

			// A writer counts a message once its write returned, which
			// may be just after the client has read it.
			waitFor(t, "13 deliveries", 5*time.Second, func() bool { return hb.Stats().Delivered == 13 })
			st := hb.Stats()
			require.Zero(t, st.Dropped)
			require.Zero(t, st.Pending)

			// A connection that closes leaves the Hub (Wrap's OnClose).
			a.conn.Close(gust.StatusNormalClosure, "")
			<-a.closed
			a.closed <- nil // for the cleanup
			waitFor(t, "a to leave", 5*time.Second, func() bool { return hb.Stats().Connections == 2 })
			ab.send(t, "leave:b")
			// Without topics, ab stays: it joined through Wrap, for PublishAll.
			require.Equal(t, 2, hb.Stats().Connections)
			require.Equal(t, 1, hb.Stats().Topics)
		})
	}
}

// Without Wrap, a connection that closed is dropped when a message is next
// published to it; one that leaves its last topic leaves the Hub.
func TestHubWithoutWrap(t *testing.T) {
	hb, err := hub.New(nil)
	require.NoError(t, err)
	defer hb.Close()
	s := startHubServer(t, serverConfig{hub: hb, autoJoin: "news"})
	c1 := dialHub(t, s.url, 0, false, true)
	c2 := dialHub(t, s.url, 0, false, true)
	waitFor(t, "2 connections", 5*time.Second, func() bool { return hb.Stats().Connections == 2 })

	c1.conn.Close(gust.StatusNormalClosure, "")
	<-c1.closed
	c1.closed <- nil
	<-s.done
	require.Equal(t, 2, hb.Stats().Connections, "still held: nothing told the Hub")
	require.NoError(t, hb.Publish("news", gust.OpText, []byte("x")))
	waitFor(t, "the closed connection to go", 5*time.Second, func() bool { return hb.Stats().Connections == 1 })

	c2.send(t, "leave:news")
	require.Equal(t, 0, hb.Stats().Connections)

	// After Close, Publish and Subscribe fail.
	require.NoError(t, hb.Close())
	require.ErrorIs(t, hb.Publish("news", gust.OpText, nil), hub.ErrClosed)
	require.NoError(t, c2.conn.WriteString("join:news"))
	waitFor(t, "the server's error", 5*time.Second, func() bool { return len(c2.textsNow()) == 2 })
	require.Equal(t, []string{"x", "error:" + hub.ErrClosed.Error()}, c2.textsNow())
}

func TestHubRejectsBadOpcode(t *testing.T) {
	var hb hub.Hub
	require.Error(t, hb.Publish("t", gust.Opcode(9), nil))
	require.Equal(t, hub.Stats{}, hb.Stats())
}

// A receiver that stops reading, behind tiny socket buffers, while the
// publisher goes at full rate: under OutboxCloseSlow it is closed with 1008,
// under OutboxDropOldest and OutboxDropNewest it loses messages; the other
// receivers get every message, in order, and the Hub's live heap stays
// bounded whatever the volume published.
func TestHubSlowConsumer(t *testing.T) {
	const (
		fast      = 6
		messages  = 20000
		size      = 1024
		queueSize = 256
	)
	for _, policy := range []gust.OutboxPolicy{gust.OutboxCloseSlow, gust.OutboxDropOldest, gust.OutboxDropNewest} {
		t.Run(policy.String(), func(t *testing.T) {
			hb, err := hub.New(nil)
			require.NoError(t, err)
			defer hb.Close()
			opts := &gust.Options{OutboxSize: queueSize, OutboxPolicy: policy, WriteTimeout: time.Minute}
			s := startHubServer(t, serverConfig{hub: hb, wrap: true, autoJoin: "feed", sndbuf: 16 << 10, opts: opts})
			var fastClients []*hubClient
			for range fast {
				fastClients = append(fastClients, dialHub(t, s.url, 0, false, true))
			}
			stalled := dialHub(t, s.url, 32<<10, false, false)
			waitFor(t, "every subscriber", 5*time.Second, func() bool { return hb.Stats().Connections == fast+1 })

			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			base := ms.HeapAlloc
			var maxLive uint64

			// Full rate: the publisher never waits for a socket; it only
			// waits for the fast receivers to keep up (below).
			payload := make([]byte, size)
			start := time.Now()
			for i := range messages {
				binary.BigEndian.PutUint64(payload, uint64(i))
				require.NoError(t, hb.Publish("feed", gust.OpBinary, payload))
				// Keep every fast receiver within half a queue of the
				// publisher, so that however the scheduler treats them
				// (a loaded machine runs one late), only the stalled one
				// can fill its queue.
				for _, c := range fastClients {
					for int(c.count.Load()) < i-queueSize/2 {
						time.Sleep(20 * time.Microsecond)
					}
				}
				if i%4000 == 3999 {
					runtime.GC()
					runtime.ReadMemStats(&ms)
					maxLive = max(maxLive, ms.HeapAlloc-min(ms.HeapAlloc, base))
				}
			}
			elapsed := time.Since(start)
			for _, c := range fastClients {
				waitFor(t, "the fast receivers", 30*time.Second, func() bool { return c.count.Load() == messages })
				seqs, bad := c.seqsNow()
				require.NoError(t, bad)
				require.Len(t, seqs, messages)
				require.EqualValues(t, messages-1, seqs[messages-1])
			}
			st := hb.Stats()
			t.Logf("%v: %d messages of %d bytes to %d+1 receivers in %v; live heap growth at most %d KiB (%d MiB published); %+v",
				policy, messages, size, fast, elapsed.Round(time.Millisecond), maxLive>>10, messages*size>>20, st)
			// Unbounded queues would keep ~20 MiB for the stalled receiver.
			require.Less(t, maxLive, uint64(4<<20), "the Hub's memory grows with the volume published")
			require.Positive(t, st.Dropped)

			// The stalled client reads again, with a normal buffer (a tiny
			// window crawls): what it gets depends on the policy.
			stalled.conn.NetConn().(*net.TCPConn).SetReadBuffer(1 << 20)
			go stalled.conn.ReadLoop()
			stalledAddr := stalled.conn.LocalAddr().String()
			switch policy {
			case gust.OutboxCloseSlow:
				require.EqualValues(t, 1, st.ClosedSlow)
				var err error
				select {
				case err = <-stalled.closed:
				case <-time.After(20 * time.Second):
					t.Fatal("the slow consumer was not closed")
				}
				stalled.closed <- err
				require.Equal(t, gust.StatusPolicyViolation, gust.CloseStatus(err), "client saw %v", err)
				waitFor(t, "the server's OnClose", 10*time.Second, func() bool { return s.closeErr(stalledAddr) != nil })
				serr := s.closeErr(stalledAddr)
				require.ErrorIs(t, serr, gust.ErrSlowConsumer)
				var pe *gust.ProtocolError
				require.False(t, errors.As(serr, &pe), "a slow consumer is not the peer's protocol error: %v", serr)
				seqs, bad := stalled.seqsNow()
				require.NoError(t, bad)
				for i, s := range seqs { // a prefix, without gaps, then the close
					require.EqualValues(t, i, s)
				}
				require.Less(t, len(seqs), messages)
			case gust.OutboxDropOldest:
				require.Zero(t, st.ClosedSlow)
				waitFor(t, "the latest message", 20*time.Second, func() bool {
					seqs, _ := stalled.seqsNow()
					return len(seqs) > 0 && seqs[len(seqs)-1] == messages-1
				})
				seqs, bad := stalled.seqsNow()
				require.NoError(t, bad)
				require.Less(t, len(seqs), messages, "nothing was dropped")
			case gust.OutboxDropNewest:
				require.Zero(t, st.ClosedSlow)
				waitFor(t, "the queue to drain", 20*time.Second, func() bool { return hb.Stats().Pending == 0 })
				time.Sleep(100 * time.Millisecond)
				seqs, bad := stalled.seqsNow()
				require.NoError(t, bad)
				require.NotEmpty(t, seqs)
				require.EqualValues(t, 0, seqs[0])
				require.Less(t, seqs[len(seqs)-1], uint64(messages-1), "the newest were dropped")
			}
		})
	}
}

// A full outbox calls the done function of a message it discards on the
// publisher's goroutine: the Hub holds no lock then, so that done function
// may call the Hub.
func TestHubDoneMayCallTheHub(t *testing.T) {
	hb := new(hub.Hub) // no Close: on a deadlock it would hang, not fail
	opened := make(chan *gust.Conn, 1)
	h := &openHandler{opened: opened}
	opts := gust.Options{OutboxSize: 1, OutboxPolicy: gust.OutboxDropOldest, WriteTimeout: time.Minute}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: hb.Wrap(h), Options: opts}}
	go srv.Serve(sndbufListener{ln, 16 << 10})
	defer srv.Close()
	peer := dialHub(t, "ws://"+ln.Addr().String()+"/", 32<<10, false, false) // its read loop never runs
	c := <-opened

	// The writer blocks on a message the peer does not read (its first
	// byte arriving shows that the writer has taken it); the next one
	// waits in the outbox, and a publish discards it.
	require.NoError(t, c.WriteAsync(gust.OpBinary, make([]byte, 4<<20), nil))
	var first [1]byte
	peer.conn.NetConn().SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadFull(peer.conn.NetConn(), first[:])
	require.NoError(t, err)
	require.Equal(t, byte(0x82), first[0])
	discarded, subscribed := make(chan error, 1), make(chan error, 1)
	require.NoError(t, c.WriteAsync(gust.OpText, []byte("mine"), func(err error) {
		discarded <- err
		subscribed <- hb.Subscribe(c, "later")
	}))
	published := make(chan error, 1)
	go func() { published <- hb.PublishAll(gust.OpText, []byte("news")) }()
	for _, ch := range []chan error{discarded, subscribed, published} {
		select {
		case err := <-ch:
			if ch == discarded {
				require.ErrorIs(t, err, gust.ErrQueueFull)
			} else {
				require.NoError(t, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the publisher and the done function wait for each other")
		}
	}
	require.Equal(t, 1, hb.Stats().Topics)
}

type openHandler struct {
	gust.BuiltinEventHandler
	opened chan *gust.Conn
}

func (h *openHandler) OnOpen(c *gust.Conn) { h.opened <- c }

// Two Hubs on two servers share a LocalBroker: what is published on either
// reaches the clients of both, once each.
func TestHubBroker(t *testing.T) {
	broker := hub.NewLocalBroker()
	var servers []*hubServer
	var clients []*hubClient
	for range 2 {
		hb, err := hub.New(&hub.Options{Broker: broker})
		require.NoError(t, err)
		defer hb.Close()
		s := startHubServer(t, serverConfig{hub: hb, wrap: true})
		servers = append(servers, s)
		for range 2 {
			c := dialHub(t, s.url, 0, false, true)
			c.send(t, "join:room")
			clients = append(clients, c)
		}
	}
	require.NoError(t, servers[0].hub.Publish("room", gust.OpText, []byte("from 0")))
	require.NoError(t, servers[1].hub.Publish("room", gust.OpText, []byte("from 1")))
	require.NoError(t, servers[1].hub.Publish("elsewhere", gust.OpText, []byte("nobody")))
	require.NoError(t, servers[0].hub.PublishAll(gust.OpText, []byte("all from 0")))
	for i, c := range clients {
		waitFor(t, "3 messages", 5*time.Second, func() bool { return c.count.Load() >= 3 })
		time.Sleep(20 * time.Millisecond) // a duplicate would show now
		require.Equal(t, []string{"from 0", "from 1", "all from 0"}, c.textsNow(), "client %d", i)
	}

	// After Close, a Hub no longer hears the broker.
	require.NoError(t, servers[1].hub.Close())
	require.NoError(t, servers[0].hub.Publish("room", gust.OpText, []byte("after close")))
	waitFor(t, "local delivery", 5*time.Second, func() bool { return clients[0].count.Load() == 4 })
	time.Sleep(20 * time.Millisecond)
	require.EqualValues(t, 3, clients[2].count.Load())
}

func TestLocalBroker(t *testing.T) {
	b := hub.NewLocalBroker()
	var got []string
	unsub, err := b.Subscribe(func(topic string, msg []byte) { got = append(got, topic+"="+string(msg)) })
	require.NoError(t, err)
	require.NoError(t, b.Publish("t", []byte("1")))
	unsub()
	unsub()
	require.NoError(t, b.Publish("t", []byte("2")))
	require.Equal(t, []string{"t=1"}, got)
}

// A broadcast server: every connection joins the Hub through Wrap, chooses
// rooms with a message, and the server pushes to a room or to everyone. A
// connection whose outbox (256 messages) overflows is closed with 1008.
func ExampleHub() {
	hb := new(hub.Hub) // local to the process; hub.New for one with a Broker
	srv := &gust.Server{Upgrader: gust.Upgrader{
		Handler: hb.Wrap(roomHandler{hub: hb}),
		Options: gust.Options{OutboxPolicy: gust.OutboxCloseSlow},
	}}
	go srv.ListenAndServe("127.0.0.1:0")
	defer srv.Close()

	hb.Publish("lobby", gust.OpText, []byte("to the lobby"))
	hb.PublishAll(gust.OpText, []byte("to everyone"))
	fmt.Println(hb.Stats().Connections)
	// Output: 0
}

type roomHandler struct {
	gust.BuiltinEventHandler
	hub *hub.Hub
}

func (h roomHandler) OnMessage(c *gust.Conn, m *gust.Message) {
	h.hub.Subscribe(c, string(m.Data)) // the message names a room
	m.Close()
}

// A broker message the Hub cannot decode is a Warn record with the topic as
// an attribute, and is otherwise ignored.
func TestHubLogsUndecodableBrokerMessages(t *testing.T) {
	var logged testkit.Buffer
	b := hub.NewLocalBroker()
	h, err := hub.New(&hub.Options{Broker: b, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	require.NoError(t, err)
	defer h.Close()
	require.NoError(t, b.Publish("room-1", []byte("not an envelope")))
	out := logged.String()
	require.Contains(t, out, `level=WARN msg="gust: hub: ignoring a broker message that is not a hub envelope"`)
	require.Contains(t, out, "topic=room-1")
}
