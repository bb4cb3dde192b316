package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// chatProc is examples/chat running as a child process on 127.0.0.1, its
// output read line by line: the address it listens on, the runtime's
// gctrace lines when asked for, and the rest kept for the report of a
// failure.
type chatProc struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{} // closed when the process has ended
	err    error         // its exit status, once exited is closed

	mu     sync.Mutex
	gcs    []gcLine
	gcWake chan struct{} // closed and replaced at each gc line
	tail   []string      // the last lines that were not gctrace's
	lines  int           // such lines in all
}

// gcLine is what histbench takes from a gctrace line:
// "gc N @Ts P%: ... ms clock, ... ms cpu, A->B->C MB, G MB goal, ...".
type gcLine struct {
	n       int
	liveMiB int // C: the heap marked live by that GC (the runtime's "MB" are MiB)
}

var gcRE = regexp.MustCompile(`^gc (\d+) @[0-9.]+s .*?(\d+)->(\d+)->(\d+) MB`)

func parseGCLine(s string) (gcLine, bool) {
	m := gcRE.FindStringSubmatch(s)
	if m == nil {
		return gcLine{}, false
	}
	n, _ := strconv.Atoi(m[1])
	live, _ := strconv.Atoi(m[4])
	return gcLine{n: n, liveMiB: live}, true
}

// startChat runs the chat binary bin on a port of 127.0.0.1 the kernel
// picks, in netpoll mode or not, keeping history messages per room (0: the
// chat's default), with GODEBUG=gctrace=1 when gctrace is set. It returns
// once the chat says where it listens.
func startChat(bin string, netpoll bool, history int, gctrace bool) (*chatProc, error) {
	args := []string{"-addr", "127.0.0.1:0"}
	if netpoll {
		args = append(args, "-netpoll")
	}
	if history > 0 {
		args = append(args, "-history", strconv.Itoa(history))
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	if gctrace {
		cmd.Env = append(cmd.Env, "GODEBUG=gctrace=1")
	}
	// The chat dies with histbench, however histbench ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("starting the chat: %w", err)
	}
	pw.Close()
	ch := &chatProc{cmd: cmd, exited: make(chan struct{}), gcWake: make(chan struct{})}
	addr := make(chan string, 1)
	go ch.readOutput(pr, addr)
	go func() {
		ch.err = cmd.Wait()
		close(ch.exited)
	}()
	select {
	case ch.addr = <-addr:
		return ch, nil
	case <-ch.exited:
		return nil, fmt.Errorf("the chat exited at start (%v): %s", ch.err, ch.lastLines())
	case <-time.After(15 * time.Second):
		ch.stop()
		return nil, fmt.Errorf("the chat did not say where it listens within 15 s: %s", ch.lastLines())
	}
}

func (ch *chatProc) readOutput(pr *os.File, addr chan<- string) {
	defer pr.Close()
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		s := sc.Text()
		if g, ok := parseGCLine(s); ok {
			ch.mu.Lock()
			ch.gcs = append(ch.gcs, g)
			close(ch.gcWake)
			ch.gcWake = make(chan struct{})
			ch.mu.Unlock()
			continue
		}
		if _, a, ok := strings.Cut(s, "chat on http://"); ok {
			select {
			case addr <- strings.TrimSpace(a):
			default:
			}
		}
		ch.mu.Lock()
		ch.lines++
		if len(ch.tail) == 20 {
			ch.tail = ch.tail[1:]
		}
		ch.tail = append(ch.tail, s)
		ch.mu.Unlock()
	}
	// A scanner error (a line past 1 MiB) ends the reading; drain the rest
	// so the chat never blocks on its output.
	var b [32 << 10]byte
	for {
		if _, err := pr.Read(b[:]); err != nil {
			return
		}
	}
}

// lastGC returns the chat's last gctrace line (n 0 before the first).
func (ch *chatProc) lastGC() (gcLine, <-chan struct{}) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.gcs) == 0 {
		return gcLine{}, ch.gcWake
	}
	return ch.gcs[len(ch.gcs)-1], ch.gcWake
}

// logLines returns how many lines the chat wrote besides gctrace's.
func (ch *chatProc) logLines() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.lines
}

func (ch *chatProc) lastLines() string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.tail) == 0 {
		return "(no output)"
	}
	return strings.Join(ch.tail, " | ")
}

// alive returns an error once the chat has exited.
func (ch *chatProc) alive() error {
	select {
	case <-ch.exited:
		return fmt.Errorf("the chat exited during the run (%v): %s", ch.err, ch.lastLines())
	default:
		return nil
	}
}

// stop ends the chat: SIGTERM, then SIGKILL 3 s later if it has not gone
// (its graceful shutdown waits for members that may never answer).
func (ch *chatProc) stop() {
	ch.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-ch.exited:
		return
	case <-time.After(3 * time.Second):
	}
	ch.cmd.Process.Kill()
	<-ch.exited
}

// procStatus returns the chat's VmRSS and VmHWM (its peak RSS), in MiB.
func (ch *chatProc) procStatus() (rss, hwm float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", ch.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != "VmRSS" && k != "VmHWM" {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc status %s: %q", k, v)
		}
		if k == "VmRSS" {
			rss = kb / 1024
		} else {
			hwm = kb / 1024
		}
	}
	if rss == 0 {
		return 0, 0, errors.New("no VmRSS in /proc status")
	}
	return rss, hwm, nil
}

// nudgeText is a message the chat decodes and then drops (its text is
// blank once trimmed): ~16 KB of garbage in the chat's heap and nothing
// kept, under the chat's 16 KiB MaxMessageSize.
var nudgeText = []byte(`{"text":"` + strings.Repeat(" ", 16000) + `"}`)

// liveHeap returns the heap the chat holds live, as the second GC that
// starts after the call marks it, and its RSS then. The chat runs no GC
// on demand, so histbench makes garbage in it through nudge, a member of a
// room of its own, until that GC has come: blank messages, which the chat
// decodes and drops.
func (ch *chatProc) liveHeap(ctx context.Context, nudge *wsConn) (heapMiB int, rssMiB float64, gc int, err error) {
	g, wake := ch.lastGC()
	target := g.n + 2 // g.n+1 may have started before the call
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	dl, _ := ctx.Deadline()
	nudge.nc.SetWriteDeadline(dl)
	defer nudge.nc.SetWriteDeadline(time.Time{})
	for g.n < target {
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, 0, 0, fmt.Errorf("waiting for the chat's GC %d (gctrace): %w", target, ctx.Err())
		default:
			if err := nudge.writeText(nudgeText); err != nil {
				return 0, 0, 0, fmt.Errorf("nudging the chat's GC: %w", err)
			}
		}
		if err := ch.alive(); err != nil {
			return 0, 0, 0, err
		}
		g, wake = ch.lastGC()
	}
	rssMiB, _, err = ch.procStatus()
	return g.liveMiB, rssMiB, g.n, err
}
