package servers

import (
	"net/http"

	"github.com/lxzan/gws"
)

// gws: the Upgrader on net/http and ReadLoop in the handler's goroutine, as in gws's "Best
// Practice"; events are emitted synchronously (ParallelEnabled false) and compression is off.

func init() {
	register("gws", "github.com/lxzan/gws: Upgrader, ReadLoop per connection, OnMessage writes back (parallel off)", startGWS)
}

type gwsEcho struct{ gws.BuiltinEventHandler }

func (gwsEcho) OnMessage(c *gws.Conn, m *gws.Message) {
	defer m.Close()
	_ = c.WriteMessage(m.Opcode, m.Bytes()) // gws reports write errors through OnClose
}

func startGWS(addr string) (Server, error) {
	up := gws.NewUpgrader(gwsEcho{}, &gws.ServerOption{
		ParallelEnabled:    false,
		ReadMaxPayloadSize: MaxMessage,
	})
	return serveHTTP(addr, func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r)
		if err != nil {
			return
		}
		c.ReadLoop()
	})
}
