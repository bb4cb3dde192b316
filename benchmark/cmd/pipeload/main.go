// Command pipeload is a second load generator for the pipelined scenario a,
// written apart from gustload so that a figure does not rest on one tool:
// one raw TCP connection, its own handshake and frame parser, no WebSocket
// library. A writer keeps -w messages in flight, sending as many frames as
// the window has room for in one write once a quarter of it is free; a
// reader counts the echoes, and checks each one's length and first payload
// byte.
//
//	pipeload -w 256 -p 300 -T 5 -pid "$SERVER_PID" 127.0.0.1:9001
//
// It prints the rate, the client's CPU and, with -pid, the server's CPU
// (from /proc), as text or, with -json, as one JSON object. Loopback only;
// the run stops by itself after -T seconds.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	window := flag.Int("w", 256, "messages in flight")
	size := flag.Int("p", 300, "payload bytes per message (text)")
	seconds := flag.Float64("T", 5, "seconds to run")
	pid := flag.Int("pid", 0, "server pid, to report its CPU from /proc")
	asJSON := flag.Bool("json", false, "print one JSON object")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: pipeload [flags] host:port")
		os.Exit(2)
	}
	res, err := run(flag.Arg(0), *window, *size, time.Duration(*seconds*float64(time.Second)), *pid)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipeload:", err)
		os.Exit(1)
	}
	if *asJSON {
		_ = json.NewEncoder(os.Stdout).Encode(res)
		return
	}
	fmt.Printf("pipeload: %d messages of %d bytes, window %d, in %.2fs: %.0f msg/s; client CPU %.0f%%",
		res.Messages, *size, *window, res.Seconds, res.MsgPerSec, res.ClientCPUPercent)
	if *pid > 0 {
		fmt.Printf(", server CPU %.0f%% (%.2f s per million messages)", res.ServerCPUPercent, res.ServerCPUPerM)
	}
	fmt.Println()
}

// Result is one run's figures.
type Result struct {
	Messages         int64   `json:"messages"`
	Seconds          float64 `json:"seconds"`
	MsgPerSec        float64 `json:"msg_per_sec"`
	ClientCPUPercent float64 `json:"client_cpu_percent"`
	ServerCPUPercent float64 `json:"server_cpu_percent,omitempty"`
	ServerCPUPerM    float64 `json:"server_cpu_s_per_million,omitempty"`
}

func run(addr string, window, size int, d time.Duration, pid int) (*Result, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("%s: loopback addresses only", addr)
	}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	br := bufio.NewReaderSize(conn, 64<<10)
	if err := handshake(conn, br, addr); err != nil {
		return nil, err
	}

	frame := clientFrame(size)
	var (
		inflight atomic.Int64
		received atomic.Int64
		stop     atomic.Bool
		room     = make(chan struct{}, 1)
		readErr  = make(chan error, 1)
	)
	go func() { readErr <- readEchoes(br, size, &received, &inflight, room, &stop) }()

	cpu0, srv0 := selfCPU(), procCPU(pid)
	start := time.Now()
	deadline := start.Add(d)
	conn.SetDeadline(deadline.Add(5 * time.Second))
	batch := make([]byte, 0, window*len(frame))
	refill := max(1, window/4) // write when a quarter of the window is free
	for time.Now().Before(deadline) {
		k := window - int(inflight.Load())
		if k < refill && inflight.Load() > 0 {
			select {
			case <-room:
			case err := <-readErr:
				return nil, err
			case <-time.After(time.Until(deadline)):
			}
			continue
		}
		batch = batch[:0]
		for range k {
			batch = append(batch, frame...)
		}
		inflight.Add(int64(k))
		if _, err := conn.Write(batch); err != nil {
			return nil, err
		}
	}
	elapsed := time.Since(start)
	n := received.Load()
	cpu1, srv1 := selfCPU(), procCPU(pid)
	stop.Store(true)
	select {
	case err := <-readErr:
		if err != nil {
			return nil, err
		}
	default:
	}
	conn.Close()

	res := &Result{
		Messages:         n,
		Seconds:          elapsed.Seconds(),
		MsgPerSec:        float64(n) / elapsed.Seconds(),
		ClientCPUPercent: 100 * (cpu1 - cpu0).Seconds() / elapsed.Seconds(),
	}
	if pid > 0 && srv1 >= srv0 && n > 0 {
		s := (srv1 - srv0).Seconds()
		res.ServerCPUPercent = 100 * s / elapsed.Seconds()
		res.ServerCPUPerM = s / float64(n) * 1e6
	}
	if n == 0 {
		return nil, errors.New("no echo arrived")
	}
	return res, nil
}

// handshake sends the opening request and checks for a 101 answer.
func handshake(conn net.Conn, br *bufio.Reader, addr string) error {
	req := "GET / HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: cGlwZWxvYWQga2V5IDEyMw==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		return err
	}
	status, err := br.ReadString('\n')
	if err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if !strings.HasPrefix(status, "HTTP/1.1 101") {
		return fmt.Errorf("handshake: %q", strings.TrimSpace(status))
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return fmt.Errorf("handshake: %w", err)
		}
		if line == "\r\n" {
			return nil
		}
	}
}

// clientFrame is one masked text frame of size payload bytes, all 'p'.
func clientFrame(size int) []byte {
	key := [4]byte{0x5a, 0x17, 0xc3, 0x81}
	var f []byte
	switch {
	case size < 126:
		f = append(f, 0x81, 0x80|byte(size))
	case size < 1<<16:
		f = append(f, 0x81, 0x80|126)
		f = binary.BigEndian.AppendUint16(f, uint16(size))
	default:
		f = append(f, 0x81, 0x80|127)
		f = binary.BigEndian.AppendUint64(f, uint64(size))
	}
	f = append(f, key[:]...)
	for i := range size {
		f = append(f, 'p'^key[i%4])
	}
	return f
}

// readEchoes reads the server's frames until stop, counting each data frame
// of the right length and content as one echo.
func readEchoes(br *bufio.Reader, size int, received, inflight *atomic.Int64, room chan struct{}, stop *atomic.Bool) error {
	var hdr [14]byte
	for {
		if _, err := io.ReadFull(br, hdr[:2]); err != nil {
			if stop.Load() {
				return nil
			}
			return err
		}
		op := hdr[0] & 0x0f
		masked := hdr[1]&0x80 != 0
		n := uint64(hdr[1] & 0x7f)
		switch n {
		case 126:
			if _, err := io.ReadFull(br, hdr[2:4]); err != nil {
				return err
			}
			n = uint64(binary.BigEndian.Uint16(hdr[2:4]))
		case 127:
			if _, err := io.ReadFull(br, hdr[2:10]); err != nil {
				return err
			}
			n = binary.BigEndian.Uint64(hdr[2:10])
		}
		var key [4]byte
		if masked { // raw echo servers send the client's frame back as it is
			if _, err := io.ReadFull(br, key[:]); err != nil {
				return err
			}
		}
		if op != 0x1 || hdr[0]&0x80 == 0 || n != uint64(size) {
			return fmt.Errorf("unexpected frame: first byte %#x, %d bytes", hdr[0], n)
		}
		first, err := br.Peek(1)
		if err != nil {
			return err
		}
		if first[0]^key[0] != 'p' {
			return fmt.Errorf("echo corrupted: first byte %q", first[0]^key[0])
		}
		if _, err := br.Discard(int(n)); err != nil {
			return err
		}
		received.Add(1)
		inflight.Add(-1)
		select {
		case room <- struct{}{}:
		default:
		}
	}
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is process pid's user and system CPU time, from /proc (Linux).
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name, which may hold spaces: state is field 3.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)          // utime, field 14
	st, _ := strconv.ParseInt(f[12], 10, 64)          // stime, field 15
	return time.Duration(ut+st) * (time.Second / 100) // USER_HZ is 100 on Linux
}
