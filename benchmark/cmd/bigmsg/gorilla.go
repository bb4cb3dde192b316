//go:build !only_gust && !only_coder

package main

import (
	"fmt"
	"io"
	"net/http"

	"github.com/gorilla/websocket"
)

func init() {
	senders["gorilla"] = gorillaSend
	receivers["gorilla"] = gorillaReceive
}

func gorillaSend(c config, src io.Reader) (int64, error) {
	d := websocket.Dialer{EnableCompression: c.compress}
	conn, _, err := d.Dial("ws://"+c.addr+"/", nil)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	w, err := conn.NextWriter(websocket.BinaryMessage)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(w, src)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, err
	}
	_, answer, err := conn.ReadMessage()
	if err != nil {
		return n, err
	}
	conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	return n, checkAnswer(string(answer), n)
}

func gorillaReceive(c config, dst io.Writer, started func()) (int64, error) {
	u := websocket.Upgrader{EnableCompression: c.compress}
	return receiveOnce(c.addr, func(w http.ResponseWriter, r *http.Request) (int64, error) {
		conn, err := u.Upgrade(w, r, nil)
		if err != nil {
			return 0, err
		}
		defer conn.Close()
		started()
		_, rd, err := conn.NextReader()
		if err != nil {
			return 0, err
		}
		n, err := io.Copy(dst, rd)
		if err == nil {
			err = conn.WriteMessage(websocket.TextMessage, []byte(fmt.Sprintf("ok %d", n)))
		}
		if err == nil {
			conn.ReadMessage() // the sender's close
		}
		return n, err
	})
}
