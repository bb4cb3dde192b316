package hub_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gustws/gust/internal/leakcheck"
)

// TestMain fails the run when goroutines of gust or of the Hub outlive the
// tests: outbox writers end with their connection.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakcheck.Leaked(5*time.Second, "github.com/gustws/gust", "github.com/gustws/gust/hub"); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}
