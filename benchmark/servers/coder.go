package servers

import (
	"context"
	"net/http"

	"github.com/coder/websocket"
)

// coder: Accept, then Read and Write in the handler's goroutine (the convenience methods over
// Reader/Writer). The read limit is raised from its 32 KiB default so 1 MiB messages pass.

func init() {
	register("coder", "github.com/coder/websocket: Accept, Read + Write loop in the handler goroutine", startCoder)
}

func startCoder(addr string) (Server, error) {
	opts := &websocket.AcceptOptions{InsecureSkipVerify: true, CompressionMode: websocket.CompressionDisabled}
	return serveHTTP(addr, func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, opts)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(MaxMessage)
		ctx := context.Background()
		for {
			typ, p, err := c.Read(ctx)
			if err != nil {
				return
			}
			if err := c.Write(ctx, typ, p); err != nil {
				return
			}
		}
	})
}
