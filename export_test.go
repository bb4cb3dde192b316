package gust

import (
	"runtime"
	"strings"
)

// What the tests reach inside the package, on every system; the Linux-only
// hooks are in export_linux_test.go.

// runningWheels counts the heartbeat wheels' goroutines in the process.
func runningWheels() int32 {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var n int32
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "wheel.(*Wheel[...]).run(") {
			n++
		}
	}
	return n
}
