package main

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gustws/gust/internal/leakcheck"
)

// TestMain lets a chaos run in a test re-execute the test binary as its
// instances and its NATS server (the command's roles), and fails the run
// when the driver's goroutines outlive the tests.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "instance" || os.Args[1] == "nats") {
		os.Exit(dispatch(os.Args[1:]))
	}
	code := m.Run()
	if code == 0 {
		if leaked := leakcheck.Leaked(5*time.Second, "github.com/gustws/gust/cluster/nats/cmd/chaos", "github.com/gustws/gust/hub"); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}
