package gustnats

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gustws/gust/internal/leakcheck"
)

// TestMain fails the run when goroutines of this package or of the Hub
// outlive the tests: a Presence's goroutine ends with Close, a Broker's
// with its Hub.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakcheck.Leaked(5*time.Second, "github.com/gustws/gust/cluster/nats", "github.com/gustws/gust/hub"); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}
