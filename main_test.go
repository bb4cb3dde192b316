package gust

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gustws/gust/internal/leakcheck"
)

// TestMain fails the run when goroutines outlive the tests: gust promises
// to start none of its own that survive a connection.
func TestMain(m *testing.M) {
	// A child process that serves HTTP/2 without extended CONNECT, for
	// TestDialH2FallsBackWithoutExtendedConnect (see startH2Child).
	if dir := os.Getenv(h2ChildEnv); dir != "" {
		os.Exit(serveH2Child(dir))
	}
	// Go's HTTP/2 server offers extended CONNECT (RFC 8441) only when the
	// process starts with GODEBUG=http2xconnect=1: run the tests in a child
	// process that has it.
	if !strings.Contains(os.Getenv("GODEBUG"), "http2xconnect=1") {
		os.Exit(rerunWithGODEBUG("http2xconnect=1"))
	}
	// Most tests wait on sockets and timeouts, not on the cores: run more
	// of them side by side than there are cores, unless -parallel says.
	flag.Parse()
	parallel := false
	flag.Visit(func(f *flag.Flag) { parallel = parallel || f.Name == "test.parallel" })
	if !parallel {
		flag.Set("test.parallel", "8")
	}
	os.Exit(leakcheck.Run(m, "github.com/gustws/gust"))
}

// rerunWithGODEBUG runs this test binary again, with setting added to
// GODEBUG, and returns its exit code.
func rerunWithGODEBUG(setting string) int {
	godebug := os.Getenv("GODEBUG")
	if godebug != "" {
		godebug += ","
	}
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), "GODEBUG="+godebug+setting)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "running the tests with GODEBUG="+setting+":", err)
		return 1
	}
	return 0
}
