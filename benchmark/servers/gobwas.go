package servers

import (
	"net/http"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
)

// gobwas: UpgradeHTTP, then the wsutil helpers over the bufio.ReadWriter that the hijack hands
// back (4 KiB each way): ReadClientData answers control frames, WriteServerMessage + Flush.

func init() {
	register("gobwas", "github.com/gobwas/ws: UpgradeHTTP, wsutil ReadClientData / WriteServerMessage over bufio", startGobwas)
}

func startGobwas(addr string) (Server, error) {
	return serveHTTP(addr, func(w http.ResponseWriter, r *http.Request) {
		conn, rw, _, err := ws.UpgradeHTTP(r, w)
		if err != nil {
			return
		}
		defer conn.Close()
		for {
			msg, op, err := wsutil.ReadClientData(rw)
			if err != nil {
				_ = rw.Flush() // a close reply may sit in the buffer
				return
			}
			if err := wsutil.WriteServerMessage(rw, op, msg); err != nil {
				return
			}
			if err := rw.Flush(); err != nil {
				return
			}
		}
	})
}
