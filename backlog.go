package gust

import "github.com/gustws/gust/internal/bufpool"

// The write backlog (netpoll mode): what the socket did not take while no
// write could wait, kept in order and written before anything else.

// netWriteBacklog is netWrite while an event loop dispatches, or while a
// backlog waits: a loop never waits for a socket, so one slow peer cannot
// hold up the others. Each write then keeps what the socket does not take
// at once in the backlog and reports it written; a goroutine writes the
// backlog under the write timeout before the connection reads again, and a
// write outside the dispatch writes it first.
func (w *writeState) netWriteBacklog(p []byte) (int, error) {
	c := w.conn()
	if w.backlog == nil {
		n, err := c.tr.write(p, true)
		if err != nil || n == len(p) {
			return n, err
		}
		w.appendBacklog(p[n:])
		return len(p), nil
	}
	if w.noWait {
		w.appendBacklog(p)
		return len(p), nil
	}
	if err := w.backlogLocked(); err != nil {
		return 0, err
	}
	return c.tr.write(p, false)
}

// appendBacklog keeps p after what the backlog holds.
func (w *writeState) appendBacklog(p []byte) { w.backlog = bufpool.Append(w.backlog, p) }

// backlogLocked writes the backlog (netWriteBacklog), waiting as a
// write outside an event loop does.
func (w *writeState) backlogLocked() error {
	c := w.conn()
	if w.backlog == nil {
		return nil
	}
	_, err := c.tr.write(*w.backlog, false)
	bufpool.Put(w.backlog)
	w.backlog = nil
	return err
}

// releaseBacklog gives the backlog back when the connection ends.
func (w *writeState) releaseBacklog() {
	if w.backlog != nil {
		bufpool.Put(w.backlog)
		w.backlog = nil
	}
}
