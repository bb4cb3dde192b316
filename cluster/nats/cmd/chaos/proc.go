package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process: its stderr goes to a log file, its stdout
// lines are kept.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed once it has exited and its stdout is read

	killed bool // by the driver, with SIGKILL: it printed no counters

	mu    sync.Mutex
	lines []string
	ready chan string // the first "ready ..." line's rest
}

// startProc starts bin with args, its stderr appended to logPath.
func startProc(name, logPath, bin string, args ...string) (*proc, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = log
	dieWithParent(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		log.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, done: make(chan struct{}), ready: make(chan string, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.lines = append(p.lines, line)
			p.mu.Unlock()
			if rest, ok := strings.CutPrefix(line, "ready "); ok {
				select {
				case p.ready <- rest:
				default:
				}
			}
		}
		cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// waitReady returns what follows "ready " on the process's stdout, or an
// error if it exits, ctx ends or d passes first.
func (p *proc) waitReady(ctx context.Context, d time.Duration) (string, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case s := <-p.ready:
		return s, nil
	case <-p.done:
		return "", fmt.Errorf("%s exited before it was ready (%v): see %s", p.name, p.cmd.ProcessState, p.log.Name())
	case <-t.C:
		return "", fmt.Errorf("%s was not ready in %v: see %s", p.name, d, p.log.Name())
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// exited tells whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig, unless the process has exited.
func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Signal(sig)
	}
}

// stop sends sig and waits up to d for the process to exit, then kills it.
// It reports whether the process exited within d.
func (p *proc) stop(sig syscall.Signal, d time.Duration) bool {
	p.signal(sig)
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		p.signal(syscall.SIGKILL)
		<-p.done
		return false
	}
}

// lastLine returns the last line the process printed that begins with
// prefix.
func (p *proc) lastLine(prefix string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(p.lines[i], prefix) {
			return p.lines[i]
		}
	}
	return ""
}

// linesAfter returns what follows prefix in each line the process printed
// that begins with it.
func (p *proc) linesAfter(prefix string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.lines {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			out = append(out, rest)
		}
	}
	return out
}
