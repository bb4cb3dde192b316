package servers

import (
	"net/http"

	"github.com/gorilla/websocket"
)

// gorilla: Upgrader with the default 4 KiB buffers, a read loop in the handler's goroutine,
// ReadMessage then WriteMessage (only this goroutine writes, as gorilla requires).

func init() {
	register("gorilla", "github.com/gorilla/websocket: read loop goroutine, ReadMessage + WriteMessage", startGorilla)
}

func startGorilla(addr string) (Server, error) {
	up := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
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
