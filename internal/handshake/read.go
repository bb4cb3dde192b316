package handshake

import (
	"errors"
	"io"

	"github.com/gustws/gust/internal/bufpool"
)

// Head is a request head that [ReadHead] read and parsed.
type Head struct {
	*Request

	// Buf holds what was read, from bufpool: the caller puts it back once
	// done with the bytes. Nil when ReadHead failed.
	Buf *[]byte

	N    int // the head's length
	Read int // how many bytes were read: (*Buf)[N:Read] followed the head
}

// ReadHead reads a request head from r into a pooled buffer and parses it,
// as each read arrives, up to maxBytes (> 0). The buffer doubles as it
// fills, so that a client that stalls (slowloris) pins a few hundred bytes.
// A head that cannot be served gives an [*Error]: Parse's, or 431 once
// maxBytes have come without the head's end. A read error is returned as
// it is; Head.Read then tells whether anything came before it (a client
// that sent nothing is not a handshake: a TCP health check). On an error
// the buffer is put back.
func ReadHead(r io.Reader, maxBytes int) (Head, error) {
	buf := bufpool.Get(min(bufpool.MinSize, maxBytes))
	w := 0
	for {
		n, err := r.Read((*buf)[w:])
		w += n
		if n > 0 {
			req, hn, perr := Parse((*buf)[:w], maxBytes)
			if perr == nil {
				return Head{Request: req, Buf: buf, N: hn, Read: w}, nil
			}
			if !errors.Is(perr, ErrIncomplete) {
				bufpool.Put(buf)
				return Head{Read: w}, perr
			}
			if w == len(*buf) {
				if w >= maxBytes { // and still incomplete
					bufpool.Put(buf)
					return Head{Read: w}, tooLarge()
				}
				buf = bufpool.Grow(buf, min(2*w, maxBytes))
			}
		}
		if err != nil {
			bufpool.Put(buf)
			return Head{Read: w}, err
		}
	}
}
