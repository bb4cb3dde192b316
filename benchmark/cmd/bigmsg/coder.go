//go:build !only_gust && !only_gorilla

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	coder "github.com/coder/websocket"
)

func init() {
	senders["coder"] = coderSend
	receivers["coder"] = coderReceive
}

func coderMode(compress bool) coder.CompressionMode {
	if compress {
		return coder.CompressionContextTakeover
	}
	return coder.CompressionDisabled
}

func coderSend(c config, src io.Reader) (int64, error) {
	ctx := context.Background()
	conn, _, err := coder.Dial(ctx, "ws://"+c.addr+"/", &coder.DialOptions{CompressionMode: coderMode(c.compress)})
	if err != nil {
		return 0, err
	}
	defer conn.CloseNow()
	w, err := conn.Writer(ctx, coder.MessageBinary)
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
	_, answer, err := conn.Read(ctx)
	if err != nil {
		return n, err
	}
	conn.Close(coder.StatusNormalClosure, "")
	return n, checkAnswer(string(answer), n)
}

func coderReceive(c config, dst io.Writer, started func()) (int64, error) {
	return receiveOnce(c.addr, func(w http.ResponseWriter, r *http.Request) (int64, error) {
		conn, err := coder.Accept(w, r, &coder.AcceptOptions{CompressionMode: coderMode(c.compress)})
		if err != nil {
			return 0, err
		}
		defer conn.CloseNow()
		conn.SetReadLimit(-1)
		started()
		ctx := r.Context()
		_, rd, err := conn.Reader(ctx)
		if err != nil {
			return 0, err
		}
		n, err := io.Copy(dst, rd)
		if err == nil {
			err = conn.Write(ctx, coder.MessageText, []byte(fmt.Sprintf("ok %d", n)))
		}
		if err == nil {
			_, _, err = conn.Read(ctx) // the sender's close
			var ce coder.CloseError
			if errors.As(err, &ce) || strings.Contains(fmt.Sprint(err), "EOF") {
				err = nil
			}
		}
		return n, err
	})
}
