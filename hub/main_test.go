package hub_test

import (
	"os"
	"testing"

	"github.com/gustws/gust/internal/leakcheck"
)

// TestMain fails the run when goroutines of gust or of the Hub outlive the
// tests: outbox writers end with their connection.
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Run(m, "github.com/gustws/gust", "github.com/gustws/gust/hub"))
}
