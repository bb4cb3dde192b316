package servers

import (
	"net/http"

	"github.com/gorilla/websocket"
)

// gorilla: Upgrader with the default 4 KiB buffers, a read loop in the handler's goroutine,
// ReadMessage then WriteMessage (only this goroutine writes, as gorilla requires).

func init() {
	register("gorilla", "github.com/gorilla/websocket: read loop goroutine, ReadMessage + WriteMessage", func(addr string) (Server, error) {
		return startGorilla(addr, false)
	})
	// gorilla-deflate: EnableCompression. gorilla implements only "no context takeover": it
	// answers server_no_context_takeover; client_no_context_takeover whatever the offer, and
	// compresses every message (level 1) with a pooled compressor.
	register("gorilla-deflate", "github.com/gorilla/websocket: as gorilla, with EnableCompression (no context takeover, level 1)", func(addr string) (Server, error) {
		return startGorilla(addr, true)
	})
}

func startGorilla(addr string, compression bool) (Server, error) {
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }, EnableCompression: compression}
	return serveHTTP(addr, func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		c.SetReadLimit(MaxMessage)
		for {
			mt, p, err := c.ReadMessage()
			if err != nil {
				return
			}
			if err := c.WriteMessage(mt, p); err != nil {
				return
			}
		}
	})
}
