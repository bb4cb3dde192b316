package servers

import (
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/gorilla/websocket"
)

// bcast-gorilla: gorilla's Upgrader and its PreparedMessage, the way its chat example fans out:
// a writer goroutine per connection fed by a buffered channel, which writes each
// PreparedMessage with WritePreparedMessage (framed, and compressed, once per message). A mutex
// serialises the writer and the echoes, as gorilla allows one writer at a time. Flow control:
// the publisher waits while more than `window` messages per connection are unwritten.

func init() {
	register("bcast-gorilla", "broadcast: github.com/gorilla/websocket PreparedMessage, a writer goroutine per connection (echo until BROADCAST_CONNS)", func(addr string) (Server, error) {
		return startGorillaBroadcast(addr, false)
	})
	register("bcast-gorilla-deflate", "broadcast: as bcast-gorilla, with EnableCompression", func(addr string) (Server, error) {
		return startGorillaBroadcast(addr, true)
	})
}

type gorillaReceiver struct {
	c  *websocket.Conn
	mu sync.Mutex
	ch chan *websocket.PreparedMessage
}

func startGorillaBroadcast(addr string, compression bool) (Server, error) {
	cfg := bcastConfigFromEnv()
	feed := newBcastFeed(cfg.size)
	trigger := &bcastTrigger{cfg: cfg}
	conns := &connSet[*gorillaReceiver]{}
	var pending atomic.Int64
	trigger.run = func(stop func() bool) {
		limit := int64(cfg.conns * cfg.window)
		for trigger.pace(pending.Load, limit, stop) {
			pm, err := websocket.NewPreparedMessage(websocket.TextMessage, feed.next())
			if err != nil {
				return
			}
			for _, r := range conns.list() {
				pending.Add(1)
				select {
				case r.ch <- pm:
				default: // this connection is far behind: skip it rather than block
					pending.Add(-1)
				}
			}
		}
	}
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }, EnableCompression: compression}
	return serveHTTP(addr, func(w http.ResponseWriter, req *http.Request) {
		c, err := up.Upgrade(w, req, nil)
		if err != nil {
			return
		}
		defer c.Close()
		c.SetReadLimit(MaxMessage)
		r := &gorillaReceiver{c: c, ch: make(chan *websocket.PreparedMessage, 4*cfg.window)}
		done := make(chan struct{})
		go func() { // the writer
			for {
				select {
				case pm := <-r.ch:
					r.mu.Lock()
					err := c.WritePreparedMessage(pm)
					r.mu.Unlock()
					pending.Add(-1)
					if err != nil {
						c.Close()
					}
				case <-done:
					for range len(r.ch) {
						<-r.ch
						pending.Add(-1)
					}
					return
				}
			}
		}()
		conns.add(r)
		trigger.opened()
		defer func() {
			conns.remove(r)
			trigger.closed()
			close(done)
		}()
		for {
			mt, p, err := c.ReadMessage()
			if err != nil {
				return
			}
			r.mu.Lock()
			err = c.WriteMessage(mt, p)
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	})
}
