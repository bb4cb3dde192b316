// Package leakcheck finds goroutines that outlive a package's tests: the
// check each TestMain of this module runs after m.Run (Run).
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Run runs m's tests and returns the exit code for os.Exit: theirs, or 1
// when they passed but goroutines of packages outlive them by 5 s (their
// stacks are printed).
func Run(m *testing.M, packages ...string) int {
	code := m.Run()
	if code == 0 {
		if leaked := Leaked(5*time.Second, packages...); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines of %s outlived the tests:\n\n%s\n", strings.Join(packages, ", "), leaked)
			code = 1
		}
	}
	return code
}

// Leaked waits up to d for the goroutines whose stacks name one of the
// packages (import paths such as "github.com/gustws/gust") to end, and
// returns the stacks of those that remain, or "" when none does. The
// goroutine that runs TestMain, and this check's own, are not counted.
func Leaked(d time.Duration, packages ...string) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if names(g, packages) && !strings.Contains(g, ".TestMain(") && !strings.Contains(g, "leakcheck.Leaked") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// names reports whether the stack g has a frame of one of the packages:
// "path.Func" or "path.(*Type)", not a package whose path only starts so.
func names(g string, packages []string) bool {
	for _, p := range packages {
		if strings.Contains(g, p+".") {
			return true
		}
	}
	return false
}
