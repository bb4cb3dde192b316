package deflate

import (
	"errors"
	"io"
	"math"
	"math/bits"
	"sync"

	"github.com/klauspost/compress/flate"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/utf8"
)

// Inflate's errors, which the caller turns into the close RFC 6455 asks
// for: 1009 for ErrTooBig, 1007 for the others.
var (
	ErrTooBig = errors.New("deflate: message over the size limit once inflated")
	ErrText   = errors.New("deflate: text not valid UTF-8")
	ErrData   = errors.New("deflate: invalid deflate data")
)

// Tail ends a message's deflate data: the sync marker the sender removed,
// then an empty final stored block, so that the inflater reports io.EOF
// rather than asking for more. The reader appends it to the compressed
// bytes before calling Inflate, or reads it after them.
const Tail = "\x00\x00\xff\xff\x01\x00\x00\xff\xff"

var readerPool sync.Pool

// Reader returns a pooled inflater of r, primed with the window the peer's
// earlier messages left when it keeps its context, for a message read as it
// arrives; PutReader gives it back. The inflater is returned with the
// error too.
func (d *State) Reader(r io.Reader) (io.ReadCloser, error) {
	fr, _ := readerPool.Get().(io.ReadCloser)
	if fr == nil {
		fr = flate.NewReader(nil)
	}
	return fr, fr.(flate.Resetter).Reset(r, d.window())
}

// PutReader gives back an inflater from Reader.
func PutReader(fr io.ReadCloser) { readerPool.Put(fr) }

// window is the dictionary of the next message: the last 2^readBits bytes
// inflated, when the peer keeps its context.
func (d *State) window() []byte {
	if d.readNoCtx {
		return nil
	}
	return d.readDict[max(0, len(d.readDict)-1<<d.readBits):]
}

// Inflate decompresses one message, src, which ends with Tail, into a
// pooled buffer, checking text as it goes unless validate is nil.
//
// It fails as soon as the output passes limit (a negative limit means
// none), and the buffers it holds until then add up to limit bytes at most
// (rounded up to 512): a small frame that would inflate to gigabytes costs
// limit bytes of output, allocated once and never copied. The output goes
// into a list of pooled chunks: the first sized for the expected message,
// each next one as large as all the earlier ones together, all of them
// within the limit; once they are full, one more byte read into a probe
// tells whether the message goes on. A message that fits the first chunk
// is returned in it, as is; a longer one is copied once into a buffer of
// its own size, and the chunks go back to the pool.
func (d *State) Inflate(src []byte, limit int64, validate *utf8.Validator) (*[]byte, int, error) {
	d.readSrc.Reset(src)
	fr, _ := readerPool.Get().(io.ReadCloser)
	if fr == nil {
		fr = flate.NewReader(nil)
	}
	if err := fr.(flate.Resetter).Reset(&d.readSrc, d.window()); err != nil {
		readerPool.Put(fr)
		return nil, 0, err
	}
	defer readerPool.Put(fr)

	room := math.MaxInt // the bytes the chunks may hold in all
	if limit >= 0 && limit < math.MaxInt {
		room = int(limit)
	}
	chunk := bufpool.Get(chunkSize(min(max(4*len(src), 512), 1<<20), room))
	d.chunks = append(d.chunks[:0], chunk)
	total, used := 0, 0 // bytes in the full chunks before chunk; bytes in chunk
	for {
		var p []byte
		var err error
		if used < len(*chunk) {
			var k int
			k, err = fr.Read((*chunk)[used:])
			p = (*chunk)[used : used+k]
			used += k
		} else {
			var k int
			k, err = fr.Read(d.probe[:])
			if k > 0 {
				total += used
				if total+k > room {
					d.dropChunks()
					return nil, 0, ErrTooBig
				}
				chunk = bufpool.Get(chunkSize(min(total, bufpool.MaxSize), room-total))
				d.chunks = append(d.chunks, chunk)
				used = copy(*chunk, d.probe[:k])
				p = (*chunk)[:used]
			}
		}
		if validate != nil && len(p) > 0 && !validate.Feed(p) {
			d.dropChunks()
			return nil, 0, ErrText
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			d.dropChunks()
			return nil, 0, ErrData
		}
	}
	n := total + used
	out := d.chunks[0]
	if len(d.chunks) > 1 {
		out = bufpool.Get(n)
		k := 0
		for _, c := range d.chunks {
			k += copy((*out)[k:n], *c)
		}
		d.dropChunks()
	} else {
		d.chunks[0] = nil
	}
	d.chunks = d.chunks[:0]
	d.Remember((*out)[:n])
	return out, n, nil
}

// chunkSize is the length of the next inflate chunk: want rounded up to a
// pool class (at most the largest), or when that passes room, the largest
// class within room, or room itself below the smallest class. So a chunk's
// capacity is its length (but for that last small one), and the chunks of a
// message never take more than room rounded up to 512 bytes.
func chunkSize(want, room int) int {
	size := min(max(bufpool.MinSize, 1<<bits.Len(uint(max(want, 1)-1))), bufpool.MaxSize)
	switch {
	case size <= room:
		return size
	case room < bufpool.MinSize:
		return room
	}
	return 1 << (bits.Len(uint(room)) - 1)
}

// dropChunks gives the chunks of an inflated message back to the pool.
func (d *State) dropChunks() {
	for i, c := range d.chunks {
		bufpool.Put(c)
		d.chunks[i] = nil
	}
	d.chunks = d.chunks[:0]
}

// Remember keeps the last 2^readBits bytes inflated, p the latest, which
// the peer's next message may refer back to when it keeps its context.
// Inflate does it itself; a message read through Reader calls it.
func (d *State) Remember(p []byte) {
	if !d.readNoCtx {
		d.readDict = slideWindow(d.readDict, p, 1<<d.readBits)
	}
}

// slideWindow appends p to buf and keeps at least the last size bytes,
// with up to size bytes of slack so that sliding is rare.
func slideWindow(buf, p []byte, size int) []byte {
	if len(p) >= size {
		if cap(buf) < size {
			buf = make([]byte, 0, size)
		}
		return append(buf[:0], p[len(p)-size:]...)
	}
	if len(buf)+len(p) > 2*size {
		keep := min(len(buf), size-len(p))
		n := copy(buf, buf[len(buf)-keep:])
		buf = buf[:n]
	}
	return append(buf, p...)
}
