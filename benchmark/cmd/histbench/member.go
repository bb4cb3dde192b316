package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// member is a chat member that reads everything the chat sends it, in a
// goroutine of its own, handing each message to its handler.
type member struct {
	c    *wsConn
	done chan struct{} // closed when the reading ends
	err  error         // why, once done is closed (nil: closed by histbench)

	closing atomic.Bool
	once    sync.Once
}

// join opens a member named name in room from since and reads it with on,
// which is called in the reading goroutine with each message (its slices
// valid for the call only).
func join(ctx context.Context, addr, name, room, since string, on func(f frame)) (*member, error) {
	c, err := dialWS(ctx, addr, wsPath(name, room, since))
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", name, err)
	}
	m := &member{c: c, done: make(chan struct{})}
	go m.read(on)
	return m, nil
}

func (m *member) read(on func(f frame)) {
	defer close(m.done)
	for {
		op, p, err := m.c.next()
		if err != nil {
			if !m.closing.Load() {
				m.err = err
				if errors.Is(err, io.EOF) {
					m.err = errors.New("the chat closed the connection")
				}
			}
			return
		}
		if op == opText && on != nil {
			on(parseFrame(p))
		}
	}
}

// close ends the member and waits for its reading goroutine.
func (m *member) close() {
	m.once.Do(func() {
		m.closing.Store(true)
		m.c.close()
	})
	<-m.done
}

// failed returns why the member stopped reading before close, if it did.
func (m *member) failed() error {
	select {
	case <-m.done:
		if m.err != nil {
			return m.err
		}
		if !m.closing.Load() {
			return errors.New("stopped reading")
		}
	default:
	}
	return nil
}

// historyText is a message of n bytes of text for the history: its number,
// then letters.
func historyText(i, n int) []byte {
	b := []byte(`{"text":"fill ` + strconv.Itoa(i) + " ")
	for len(b) < n+len(`{"text":"`) {
		b = append(b, 'a'+byte(len(b)%26))
	}
	return append(b, `"}`...)
}

// say makes a member named name say n history texts of size bytes in room,
// with at most window of them not yet back from the chat, and waits until
// all are: it returns the member, still reading, and the sequence of each
// message in the order the chat numbered them. The member must be alone in
// room, or the only one to speak.
func say(ctx context.Context, addr, name, room string, n, size, window int) (*member, []uint64, error) {
	var (
		mu   sync.Mutex
		seqs []uint64
	)
	back := make(chan struct{}, n)
	m, err := join(ctx, addr, name, room, "0", func(f frame) {
		if f.kind != kindMessage {
			return
		}
		mu.Lock()
		mine := len(seqs) < n // what follows (live messages) is not say's
		if mine {
			seqs = append(seqs, f.seq)
		}
		mu.Unlock()
		if mine {
			back <- struct{}{}
		}
	})
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*member, []uint64, error) {
		m.close()
		return nil, nil, fmt.Errorf("member %s in %s: %w", name, room, err)
	}
	m.c.nc.SetWriteDeadline(time.Now().Add(time.Minute))
	got := 0
	wait := func() error {
		select {
		case <-back:
			got++
			return nil
		case <-m.done:
			return fmt.Errorf("after %d of %d messages: %w", got, n, m.failed())
		case <-ctx.Done():
			return fmt.Errorf("after %d of %d messages: %w", got, n, ctx.Err())
		case <-time.After(time.Minute):
			return fmt.Errorf("after %d of %d messages: none back for a minute", got, n)
		}
	}
	for i := range n {
		for i-got >= window {
			if err := wait(); err != nil {
				return fail(err)
			}
		}
		if err := m.c.writeText(historyText(i, size)); err != nil {
			return fail(err)
		}
	}
	for got < n {
		if err := wait(); err != nil {
			return fail(err)
		}
	}
	m.c.nc.SetWriteDeadline(time.Time{})
	mu.Lock()
	defer mu.Unlock()
	return m, seqs, nil
}
