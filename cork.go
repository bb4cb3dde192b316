package gust

// Corking: writes made while the read goroutine dispatches what one read
// brought (from its callbacks, or from other goroutines meanwhile), or while
// the outbox writes a batch, are appended to the write buffer and reach the
// socket together, in one system call, instead of one each.

// cork makes writes append to the cork buffer; the read goroutine calls it
// when it starts dispatching freshly read bytes. early asks for an early
// flush of the batch (drainedBatch).
//
// On an event loop it also makes every write not wait (netWriteBacklog).
// It never waits for the write lock there: a goroutine holding it may be
// waiting for the socket, so it reports false, and the loop hands the
// connection, and the bytes it read, to a goroutine instead (handOff).
func (c *Conn) cork(early bool) bool {
	loop := c.rd.loop
	if c.parallel != nil && !loop {
		return true
	}
	if !loop {
		c.wr.mu.Lock()
	} else if !c.wr.mu.TryLock() {
		return false
	}
	if c.parallel == nil {
		c.wr.corked = true
		c.wr.early = early
	}
	c.wr.noWait = loop
	c.wr.mu.Unlock()
	c.rd.uncorkDue = true
	return true
}

// uncork flushes what was corked; the read goroutine calls it before each
// blocking read. On an event loop, what the socket does not take stays in
// the backlog, and the connection goes to a goroutine that writes it
// (handOff).
func (c *Conn) uncork() (yield, error) {
	if !c.rd.uncorkDue {
		return goOn, nil
	}
	if !c.rd.loop {
		c.wr.mu.Lock()
	} else if !c.wr.mu.TryLock() {
		return handOff, nil // stays corked: the goroutine flushes
	}
	c.rd.uncorkDue = false
	c.wr.corked, c.wr.early = false, false
	err := c.flushLocked()
	c.wr.noWait = false
	if err == nil && !c.rd.loop {
		err = c.writeFailed(c.writeBacklogLocked())
	}
	backlog := c.wr.backlog != nil
	c.wr.mu.Unlock()
	if err == nil && backlog {
		return handOff, nil
	}
	return goOn, err
}

// earlyFlushSize is how much a batch corks before its first flush when the
// read that brought it drained the socket and was large (earlyFlushBatch).
// The peer then sent all it could and waits for answers: a first part sent
// early lets it work while the rest of the batch is dispatched, instead of
// each side idling while the other handles a whole batch. A read that
// filled the buffer means more bytes are waiting, so the server is the one
// behind, and a small batch is answered soon anyway: those go out in one
// write. The cost is one write per earlyFlushBatch bytes read at most.
const (
	earlyFlushSize  = 16 << 10
	earlyFlushBatch = 40 << 10
)

// drainedBatch reports whether a read of n bytes into a buffer of size
// bytes calls for an early flush (earlyFlushSize).
func drainedBatch(n, size int) bool {
	return n < size && n >= earlyFlushBatch
}

// flushEarlyLocked flushes the cork buffer once it holds earlyFlushSize
// bytes, the first time in a batch that asked for it (writeState.early).
func (c *Conn) flushEarlyLocked() error {
	w := &c.wr
	if !w.early || len(*w.buf) < earlyFlushSize {
		return nil
	}
	w.early = false
	return c.flushLocked()
}

// batchLocked runs write with the write lock held and the writes corked,
// then flushes them in one system call, unless the read goroutine has corked
// the connection: it flushes before its next read. It returns the flush's
// error.
func (c *Conn) batchLocked(write func()) error {
	w := &c.wr
	wasCorked := w.corked
	w.corked = true
	write()
	w.corked = wasCorked
	if wasCorked {
		return nil
	}
	return c.flushLocked()
}
