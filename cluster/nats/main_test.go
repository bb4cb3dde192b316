package gustnats

import (
	"os"
	"testing"

	"github.com/gustws/gust/internal/leakcheck"
)

// TestMain fails the run when goroutines of this package or of the Hub
// outlive the tests: a Presence's goroutine ends with Close, a Broker's
// with its Hub.
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Run(m, "github.com/gustws/gust/cluster/nats", "github.com/gustws/gust/hub"))
}
