package gust

import (
	"bytes"
	"io"
	"math"
	"math/bits"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/flate"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/handshake"
	"github.com/gustws/gust/internal/utf8"
)

// CompressionOptions configures permessage-deflate (RFC 7692). The zero
// value turns compression off. Each field means the same on both sides:
// the plain fields are about the messages this side sends, the Peer fields
// are what this side asks of the peer's messages.
type CompressionOptions struct {
	// Enabled offers (client) or accepts (server) permessage-deflate.
	// Default false.
	Enabled bool

	// Level is the flate level for messages this side sends, from 1
	// (fastest) to 9 (smallest). Default 1. Memory: a compressor is
	// ~300 KiB at levels 1–6 and ~1 MiB at 7–9; one is held per connection
	// only while context takeover is in use and messages are being sent,
	// and pooled otherwise.
	Level int

	// Threshold is the size below which messages go out uncompressed.
	// Default 512 bytes.
	Threshold int

	// NoContextTakeover starts each message this side sends with an empty
	// window, so that no compressor is held between messages (memory) at
	// the cost of ratio. Default false; the peer may still ask for it, and
	// then it applies.
	NoContextTakeover bool

	// PeerNoContextTakeover asks the peer to start each of its messages with
	// an empty window, so that this side keeps no window for reading them.
	// A client whose server does not agree fails the handshake; a server
	// makes it a condition of accepting. Default false.
	PeerNoContextTakeover bool

	// WindowBits bounds the LZ77 window of messages this side sends, as a
	// power of two from 8 to 15. Default 15 (32 KiB).
	WindowBits int

	// PeerWindowBits asks the peer to bound the window of its messages, so
	// that this side keeps 2^PeerWindowBits bytes for reading them. A
	// client whose server answers with a larger one fails the handshake. A
	// server can ask only a client that offered client_max_window_bits
	// (gust's always does); for one that did not, it keeps 32 KiB.
	// Default 15 (32 KiB).
	PeerWindowBits int
}

const (
	defaultCompressionLevel     = flate.BestSpeed
	defaultCompressionThreshold = 512
	maxWindowBits               = 15
	minWindowBits               = 8
)

// deflateConfig is CompressionOptions with the defaults filled in and the
// fields named as RFC 7692 names its parameters, from the server's and the
// client's sides: what the negotiation code speaks.
type deflateConfig struct {
	enabled                 bool
	level, threshold        int
	serverNoContextTakeover bool
	clientNoContextTakeover bool
	serverMaxWindowBits     int
	clientMaxWindowBits     int
}

func windowBitsOrDefault(b int) int {
	if b < minWindowBits || b > maxWindowBits {
		return maxWindowBits
	}
	return b
}

// rfc returns o as the server (server true) or the client sees it.
func (o CompressionOptions) rfc(server bool) deflateConfig {
	d := deflateConfig{enabled: o.Enabled, level: o.Level, threshold: o.Threshold}
	if d.level < flate.BestSpeed || d.level > flate.BestCompression {
		d.level = defaultCompressionLevel
	}
	if d.threshold <= 0 {
		d.threshold = defaultCompressionThreshold
	}
	own, peer := windowBitsOrDefault(o.WindowBits), windowBitsOrDefault(o.PeerWindowBits)
	if server {
		d.serverNoContextTakeover, d.clientNoContextTakeover = o.NoContextTakeover, o.PeerNoContextTakeover
		d.serverMaxWindowBits, d.clientMaxWindowBits = own, peer
	} else {
		d.clientNoContextTakeover, d.serverNoContextTakeover = o.NoContextTakeover, o.PeerNoContextTakeover
		d.clientMaxWindowBits, d.serverMaxWindowBits = own, peer
	}
	return d
}

// deflateParams are the negotiated permessage-deflate parameters.
type deflateParams struct {
	serverNoContextTakeover bool
	clientNoContextTakeover bool
	serverMaxWindowBits     int // 8–15
	clientMaxWindowBits     int // 8–15
	serverBitsInResponse    bool
	clientBitsInResponse    bool
}

// String renders the parameters as a Sec-WebSocket-Extensions value.
func (p deflateParams) String() string {
	var b strings.Builder
	b.WriteString("permessage-deflate")
	if p.serverNoContextTakeover {
		b.WriteString("; server_no_context_takeover")
	}
	if p.clientNoContextTakeover {
		b.WriteString("; client_no_context_takeover")
	}
	if p.serverBitsInResponse {
		b.WriteString("; server_max_window_bits=")
		b.WriteString(strconv.Itoa(p.serverMaxWindowBits))
	}
	if p.clientBitsInResponse {
		b.WriteString("; client_max_window_bits=")
		b.WriteString(strconv.Itoa(p.clientMaxWindowBits))
	}
	return b.String()
}

// parseWindowBits reads a window-bits value: a decimal 8–15 without a
// leading zero (RFC 7692 §7.1.2).
func parseWindowBits(v string) (int, bool) {
	if len(v) == 0 || len(v) > 2 || v[0] == '0' {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < minWindowBits || n > maxWindowBits {
		return 0, false
	}
	return n, true
}

// negotiateDeflate picks the first permessage-deflate offer the server can
// accept (RFC 7692 §5, §7.1). An offer with an unknown or repeated
// parameter, or an invalid value, is declined; a malformed header declines
// compression altogether, without failing the handshake.
func negotiateDeflate(offers []handshake.Extension, o *deflateConfig) (deflateParams, bool) {
	for _, ext := range offers {
		if !strings.EqualFold(ext.Name, "permessage-deflate") {
			continue
		}
		p := deflateParams{serverMaxWindowBits: maxWindowBits, clientMaxWindowBits: maxWindowBits}
		serverBitsOffered, clientBitsOffered := false, false
		ok := true
		seen := map[string]bool{}
		for _, param := range ext.Params {
			name := strings.ToLower(param.Name)
			if seen[name] {
				ok = false
				break
			}
			seen[name] = true
			switch name {
			case "server_no_context_takeover":
				ok = !param.HasValue
				p.serverNoContextTakeover = true
			case "client_no_context_takeover":
				ok = !param.HasValue
				p.clientNoContextTakeover = true
			case "server_max_window_bits":
				serverBitsOffered = true
				p.serverMaxWindowBits, ok = parseWindowBits(param.Value)
			case "client_max_window_bits":
				clientBitsOffered = true
				if param.HasValue {
					p.clientMaxWindowBits, ok = parseWindowBits(param.Value)
				}
			default:
				ok = false
			}
			if !ok {
				break
			}
		}
		if !ok {
			continue
		}
		p.serverNoContextTakeover = p.serverNoContextTakeover || o.serverNoContextTakeover
		p.clientNoContextTakeover = p.clientNoContextTakeover || o.clientNoContextTakeover
		p.serverMaxWindowBits = min(p.serverMaxWindowBits, o.serverMaxWindowBits)
		// An offer of server_max_window_bits is accepted by answering it,
		// with the same value or a smaller one, even 15 (RFC 7692
		// §7.1.2.1); without an offer, the answer is needed only for a
		// window smaller than the 15 the client assumes.
		p.serverBitsInResponse = serverBitsOffered || p.serverMaxWindowBits < maxWindowBits
		if clientBitsOffered {
			p.clientMaxWindowBits = min(p.clientMaxWindowBits, o.clientMaxWindowBits)
			p.clientBitsInResponse = p.clientMaxWindowBits < maxWindowBits
		}
		return p, true
	}
	return deflateParams{}, false
}

// deflateOffer is the client's permessage-deflate offer. It always
// includes client_max_window_bits, so that the server may bound the window
// the client compresses with and keep a smaller one for reading.
func deflateOffer(o *deflateConfig) string {
	b := []byte("permessage-deflate")
	if o.serverNoContextTakeover {
		b = append(b, "; server_no_context_takeover"...)
	}
	if o.clientNoContextTakeover {
		b = append(b, "; client_no_context_takeover"...)
	}
	if o.serverMaxWindowBits < maxWindowBits {
		b = append(b, "; server_max_window_bits="...)
		b = strconv.AppendInt(b, int64(o.serverMaxWindowBits), 10)
	}
	b = append(b, "; client_max_window_bits"...)
	if o.clientMaxWindowBits < maxWindowBits {
		b = append(b, '=')
		b = strconv.AppendInt(b, int64(o.clientMaxWindowBits), 10)
	}
	return string(b)
}

// acceptDeflate checks the server's answer to the offer deflateOffer made
// (RFC 7692 §5, §7.1) and returns the parameters to use, or nil when the
// server declined compression. Anything the offer does not allow fails the
// handshake: an extension not offered, an unknown or repeated parameter, a
// window larger than the one asked for, a parameter the server had to
// echo and did not.
func acceptDeflate(h http.Header, o *deflateConfig) (*deflateParams, error) {
	exts, err := handshake.Extensions(h)
	if err != nil {
		return nil, badHandshake("malformed Sec-WebSocket-Extensions %q", h.Values("Sec-WebSocket-Extensions"))
	}
	if len(exts) == 0 {
		return nil, nil
	}
	ext := exts[0]
	if !o.enabled || !strings.EqualFold(ext.Name, "permessage-deflate") {
		return nil, badHandshake("the server selected extension %q, which was not offered", ext.Name)
	}
	if len(exts) > 1 {
		return nil, badHandshake("the server selected more extensions than offered: %q", h.Values("Sec-WebSocket-Extensions"))
	}
	p := &deflateParams{serverMaxWindowBits: maxWindowBits, clientMaxWindowBits: o.clientMaxWindowBits}
	seen := make(map[string]bool, len(ext.Params))
	serverBits := false
	for _, param := range ext.Params {
		name := strings.ToLower(param.Name)
		if seen[name] {
			return nil, badHandshake("permessage-deflate parameter %s repeated", name)
		}
		seen[name] = true
		switch name {
		case "server_no_context_takeover", "client_no_context_takeover":
			if param.HasValue {
				return nil, badHandshake("permessage-deflate parameter %s takes no value", name)
			}
			if name == "server_no_context_takeover" {
				p.serverNoContextTakeover = true
			} else {
				p.clientNoContextTakeover = true
			}
		case "server_max_window_bits", "client_max_window_bits":
			bits, ok := parseWindowBits(param.Value)
			if !ok {
				return nil, badHandshake("permessage-deflate parameter %s=%q is not a window size from 8 to 15", name, param.Value)
			}
			if name == "server_max_window_bits" {
				if bits > o.serverMaxWindowBits {
					return nil, badHandshake("server_max_window_bits=%d is over the %d offered", bits, o.serverMaxWindowBits)
				}
				p.serverMaxWindowBits, serverBits = bits, true
			} else {
				if bits > o.clientMaxWindowBits {
					return nil, badHandshake("client_max_window_bits=%d is over the %d offered", bits, o.clientMaxWindowBits)
				}
				p.clientMaxWindowBits = bits
			}
		default:
			return nil, badHandshake("unknown permessage-deflate parameter %q", param.Name)
		}
	}
	if o.serverNoContextTakeover && !p.serverNoContextTakeover {
		return nil, badHandshake("the server accepted permessage-deflate without the server_no_context_takeover offered")
	}
	if o.serverMaxWindowBits < maxWindowBits && !serverBits {
		return nil, badHandshake("the server accepted permessage-deflate without the server_max_window_bits offered")
	}
	// Dropping context is always allowed to the sender (RFC 7692 §7.1.1.2).
	p.clientNoContextTakeover = p.clientNoContextTakeover || o.clientNoContextTakeover
	return p, nil
}

// deflateState is a connection's permessage-deflate state: the write side
// (guarded by the Conn's write lock) and the read side (owned by the read
// goroutine).
type deflateState struct {
	level     int
	threshold int

	// write side, guarded by the Conn's write lock
	writeBits    int
	writeNoCtx   bool
	fw           *flate.Writer // held between messages only with context takeover, while busy
	writeSink    sink
	idleTimer    *time.Timer // gives fw back once the connection stops sending
	timerArmed   bool
	usedRecently bool

	// read side, owned by the read goroutine
	readBits  int
	readNoCtx bool
	readDict  []byte       // the last window of inflated bytes, with context takeover
	readSrc   bytes.Reader // a type flate has a fast path for
	chunks    []*[]byte    // the message being inflated, while inflate runs
	probe     [1]byte      // reads past full chunks
}

func newDeflateState(p deflateParams, o *deflateConfig, server bool) *deflateState {
	d := &deflateState{level: o.level, threshold: o.threshold}
	if server {
		d.writeBits, d.writeNoCtx = p.serverMaxWindowBits, p.serverNoContextTakeover
		d.readBits, d.readNoCtx = p.clientMaxWindowBits, p.clientNoContextTakeover
	} else {
		d.writeBits, d.writeNoCtx = p.clientMaxWindowBits, p.clientNoContextTakeover
		d.readBits, d.readNoCtx = p.serverMaxWindowBits, p.serverNoContextTakeover
	}
	return d
}

// Compressors are kept for reuse in small free lists, by level (1–9) and
// by window bits (8–14, levels ignored: flate's custom-window encoder has
// one). A free list, unlike a sync.Pool, drops what it has no room for at
// once: when a thousand connections go idle together, their compressors
// (~800 KiB each) are garbage at the next GC, not two GCs later.
var (
	writerFree [flate.BestCompression + 1]freeList
	windowFree [maxWindowBits]freeList
	readerPool sync.Pool
)

// freeList holds up to 2×GOMAXPROCS idle compressors.
type freeList struct {
	once sync.Once
	ch   chan *flate.Writer
}

func (f *freeList) list() chan *flate.Writer {
	f.once.Do(func() { f.ch = make(chan *flate.Writer, max(2, 2*runtime.GOMAXPROCS(0))) })
	return f.ch
}

func (f *freeList) get() *flate.Writer {
	select {
	case fw := <-f.list():
		return fw
	default:
		return nil
	}
}

func (f *freeList) put(fw *flate.Writer) {
	select {
	case f.list() <- fw:
	default: // full: let the GC have it
	}
}

func (d *deflateState) freeList() *freeList {
	if d.writeBits < maxWindowBits {
		return &windowFree[d.writeBits]
	}
	return &writerFree[d.level]
}

func (d *deflateState) getWriter(w io.Writer) *flate.Writer {
	if fw := d.freeList().get(); fw != nil {
		fw.Reset(w)
		return fw
	}
	var fw *flate.Writer
	if d.writeBits < maxWindowBits {
		fw, _ = flate.NewWriterWindow(w, 1<<d.writeBits) // 256 B to 16 KiB: always valid
	} else {
		fw, _ = flate.NewWriter(w, d.level) // level checked by CompressionOptions.rfc
	}
	return fw
}

func (d *deflateState) putWriter(fw *flate.Writer) {
	fw.ResetDict(nil, nil) // forget the dictionary: the next user has its own
	d.freeList().put(fw)
}

// sink collects compressed bytes into a pooled buffer.
type sink struct {
	buf *[]byte
	n   int
}

func (s *sink) Write(p []byte) (int, error) {
	if s.buf == nil {
		s.buf = bufpool.Get(max(s.n+len(p), 512))
	} else {
		s.buf = bufpool.Grow(s.buf, s.n+len(p))
	}
	copy((*s.buf)[s.n:], p)
	s.n += len(p)
	return len(p), nil
}

// compress deflates p into a pooled buffer, without the 4-byte sync tail
// (RFC 7692 §7.2.1). The caller holds the write lock and puts the buffer
// back.
func (d *deflateState) compress(p []byte) (*[]byte, int, error) {
	d.writeSink = sink{}
	fw := d.fw
	if fw == nil {
		// After an idle release the compressor starts from an empty
		// window: context takeover allows back-references into earlier
		// messages, it never requires them, so the peer decodes this as
		// well, and gust keeps no copy of what it sent.
		fw = d.getWriter(&d.writeSink)
	}
	_, err := fw.Write(p)
	if err == nil {
		err = fw.Flush()
	}
	if d.writeNoCtx || err != nil {
		d.putWriter(fw)
		d.fw = nil
	} else {
		d.fw = fw
		d.usedRecently = true
	}
	buf, n := d.writeSink.buf, d.writeSink.n
	d.writeSink = sink{}
	if err != nil {
		bufpool.Put(buf)
		return nil, 0, err
	}
	if n >= 4 {
		n -= 4 // drop 00 00 ff ff
	}
	return buf, n, nil
}

// deflateIdleRelease is how long a connection keeps its compressor after
// its last compressed message, with context takeover. Then the compressor
// goes back to the free list: idle connections hold kilobytes, not the
// hundreds of kilobytes of a compressor.
const deflateIdleRelease = time.Second

// release gives the compressor back, when the connection ends; the caller
// holds the write lock.
func (d *deflateState) release() {
	if d.idleTimer != nil {
		d.idleTimer.Stop()
	}
	if d.fw != nil {
		d.putWriter(d.fw)
		d.fw = nil
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

// deflateTail ends a message's deflate data: the sync marker the sender
// removed, then an empty final stored block, so that the inflater reports
// io.EOF rather than asking for more. The reader appends it to the
// compressed bytes before calling inflate.
var deflateTail = []byte{0x00, 0x00, 0xff, 0xff, 0x01, 0x00, 0x00, 0xff, 0xff}

// inflate decompresses one message, src, which ends with deflateTail, into
// a pooled buffer, checking text as it goes unless validate is nil.
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
func (d *deflateState) inflate(src []byte, limit int64, validate *utf8.Validator) (*[]byte, int, error) {
	d.readSrc.Reset(src)
	fr, _ := readerPool.Get().(io.ReadCloser)
	if fr == nil {
		fr = flate.NewReader(nil)
	}
	var dict []byte
	if !d.readNoCtx {
		dict = d.readDict[max(0, len(d.readDict)-1<<d.readBits):]
	}
	if err := fr.(flate.Resetter).Reset(&d.readSrc, dict); err != nil {
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
					return nil, 0, protocolError(StatusMessageTooBig, "message over the size limit once inflated")
				}
				chunk = bufpool.Get(chunkSize(min(total, bufpool.MaxSize), room-total))
				d.chunks = append(d.chunks, chunk)
				used = copy(*chunk, d.probe[:k])
				p = (*chunk)[:used]
			}
		}
		if validate != nil && len(p) > 0 && !validate.Feed(p) {
			d.dropChunks()
			return nil, 0, protocolError(StatusInvalidFramePayloadData, "text not valid UTF-8")
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			d.dropChunks()
			return nil, 0, protocolError(StatusInvalidFramePayloadData, "invalid deflate data")
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
	d.rememberWindow((*out)[:n])
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
func (d *deflateState) dropChunks() {
	for i, c := range d.chunks {
		bufpool.Put(c)
		d.chunks[i] = nil
	}
	d.chunks = d.chunks[:0]
}

// rememberWindow keeps the last 2^readBits inflated bytes, which the peer's
// next message may refer back to when it keeps its context.
func (d *deflateState) rememberWindow(p []byte) {
	if !d.readNoCtx {
		d.readDict = slideWindow(d.readDict, p, 1<<d.readBits)
	}
}
