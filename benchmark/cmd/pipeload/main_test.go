package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gustws/gust/benchmark/servers"
)

// TestEchoes runs pipeload briefly against servers that echo unmasked
// frames (gust) and the client's masked frames as they are (raw-buf).
func TestEchoes(t *testing.T) {
	for _, name := range []string{"gust", "raw-buf"} {
		t.Run(name, func(t *testing.T) {
			srv, err := servers.Start(name, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			res, err := run(srv.Addr(), 64, 300, 300*time.Millisecond, 0)
			if err != nil {
				t.Fatal(err)
			}
			if res.Messages < 64 || res.MsgPerSec <= 0 {
				t.Fatalf("%+v", res)
			}
		})
	}
}

// TestCorruptEcho: a server that answers with another payload is caught.
func TestCorruptEcho(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		c.Read(buf) // the request
		c.Write([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"))
		c.Read(buf)
		c.Write(append([]byte{0x81, 3}, "xyz"...))
		time.Sleep(time.Second)
	}()
	_, err = run(ln.Addr().String(), 4, 3, 2*time.Second, 0)
	if err == nil || !strings.Contains(err.Error(), "corrupted") {
		t.Fatalf("got %v, want a corrupted echo", err)
	}
}

func TestLoopbackOnly(t *testing.T) {
	if _, err := run("192.0.2.1:9", 1, 1, time.Second, 0); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("got %v", err)
	}
}
