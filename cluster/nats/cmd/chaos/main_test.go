package main

import (
	"os"
	"testing"

	"github.com/gustws/gust/internal/leakcheck"
)

// TestMain lets a chaos run in a test re-execute the test binary as its
// instances and its NATS server (the command's roles), and fails the run
// when the driver's goroutines outlive the tests.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "instance" || os.Args[1] == "nats") {
		os.Exit(dispatch(os.Args[1:]))
	}
	os.Exit(leakcheck.Run(m, "github.com/gustws/gust/cluster/nats/cmd/chaos", "github.com/gustws/gust/hub"))
}
