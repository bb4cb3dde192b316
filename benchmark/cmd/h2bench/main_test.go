package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestH2Bench builds h2bench and runs it briefly: both modes, two sizes.
// The run itself fails when an echo is wrong, a WebSocket does not close
// cleanly, the HTTP/2 WebSockets took more than one TCP connection or the
// HTTP/1.1 ones not one each.
func TestH2Bench(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "h2bench")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-n", "5,40", "-T", "300ms", "-warmup", "100ms", "-pin=false", "-json")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("h2bench: %v\n%s\n%s", err, out, stderr)
	}
	t.Logf("%s", out)
	for _, row := range []string{
		"| HTTP/2, one connection | 5 | 1 |",
		"| HTTP/1.1, one connection each | 5 | 5 |",
		"| HTTP/2, one connection | 40 | 1 |",
		"| HTTP/1.1, one connection each | 40 | 40 |",
	} {
		if !strings.Contains(string(out), row) {
			t.Errorf("no row %q in the table", row)
		}
	}
}
