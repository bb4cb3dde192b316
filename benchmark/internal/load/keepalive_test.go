package load

import (
	"context"
	"math/rand/v2"
	"net"
	"syscall"
	"testing"
	"time"
)

// Config.KeepAlive reaches the sockets: Go's default keeps TCP keepalive on, a negative value
// turns it off (gustload -tcp-keepalive -1, which scripts/bench-many uses).
func TestKeepAlive(t *testing.T) {
	srv := testServer{}
	tg, err := parseTarget(srv.start(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		keepAlive time.Duration
		want      int
	}{{0, 1}, {-1, 0}} {
		r := &runner{cfg: Config{KeepAlive: tc.keepAlive, ConnectTimeout: 5 * time.Second}, target: tg, rnd: rand.New(rand.NewPCG(1, 2))}
		c, err := r.dial(context.Background(), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := c.nc.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		got := -1
		if err := raw.Control(func(fd uintptr) {
			got, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		}); err != nil {
			t.Fatal(err)
		}
		c.nc.Close()
		if err != nil || (got != 0) != (tc.want != 0) {
			t.Errorf("KeepAlive %v: SO_KEEPALIVE %d (%v), want %d", tc.keepAlive, got, err, tc.want)
		}
	}
}
