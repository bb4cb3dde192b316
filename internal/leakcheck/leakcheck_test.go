package leakcheck

import (
	"strings"
	"testing"
	"time"
)

func park(stop chan struct{}) { <-stop }

func TestLeaked(t *testing.T) {
	stop := make(chan struct{})
	go park(stop)
	got := Leaked(100*time.Millisecond, "github.com/gustws/gust/internal/leakcheck")
	if !strings.Contains(got, "leakcheck.park") {
		t.Fatalf("the parked goroutine was not reported:\n%s", got)
	}
	if got := Leaked(100*time.Millisecond, "example.com/other"); got != "" {
		t.Fatalf("a goroutine of another package was reported:\n%s", got)
	}
	close(stop)
	if got := Leaked(5*time.Second, "github.com/gustws/gust/internal/leakcheck"); got != "" {
		t.Fatalf("a goroutine that ended was reported:\n%s", got)
	}
}
