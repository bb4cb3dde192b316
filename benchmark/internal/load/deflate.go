package load

import (
	"compress/flate"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// permessage-deflate (RFC 7692), client side, with the standard library's compress/flate only.
//
// gustload offers
//
//	permessage-deflate; client_max_window_bits
//
// (context takeover both ways; client_max_window_bits only says that the server may bound the
// window of what gustload sends), or, with DeflateNoContext, also server_no_context_takeover and
// client_no_context_takeover. The response decides:
//
//   - Sending: level 1, sync-flushed, the 4-byte 00 00 ff ff tail removed, RSV1 set. With
//     context takeover and the full 32 KiB window, one flate.Writer per connection is kept across
//     messages. With client_no_context_takeover it is Reset before each message. When the server
//     bounds the client's window below 32 KiB (gws answers client_max_window_bits=12 by default),
//     compress/flate cannot bound its match distances itself, so the writer is Reset and primed
//     with the last (window − message) bytes sent, whose output is discarded: no match then
//     reaches further back than the window. A message larger than such a window goes out
//     uncompressed (RSV1 clear), which the RFC always allows.
//   - Receiving: a message with RSV1 is inflated with one flate reader per connection. With
//     server context takeover the reader reads the connection's messages as one stream (each
//     message's payload plus 00 00 ff ff), so its window carries over without copies; should a
//     message end with a final block (the sender's, or ours when the sync point hands out no
//     bytes), the reader restarts from a copy of the last 32 KiB. With
//     server_no_context_takeover it is Reset with an empty window for every message. Messages
//     without RSV1 are plain.

const (
	maxWindowBits = 15
	minWindowBits = 8
	// maxInflate bounds a message's inflated size when it is not verified (recv-only).
	maxInflate = 64 << 20
)

var (
	syncTail = []byte{0x00, 0x00, 0xff, 0xff}
)

// deflateParams are what the server accepted.
type deflateParams struct {
	serverNoContext bool
	clientNoContext bool
	serverBits      int // the window of the server's messages, 8–15
	clientBits      int // the window of ours, 8–15
	response        string
}

// deflateOffer is the Sec-WebSocket-Extensions value gustload sends.
func deflateOffer(noContext bool) string {
	if noContext {
		return "permessage-deflate; server_no_context_takeover; client_no_context_takeover; client_max_window_bits"
	}
	return "permessage-deflate; client_max_window_bits"
}

// extension is one element of a Sec-WebSocket-Extensions list.
type extension struct {
	name   string
	params []extParam
}

type extParam struct {
	name, value string
	hasValue    bool
}

// parseExtensions parses a Sec-WebSocket-Extensions value (RFC 6455 §9.1): a comma-separated
// list of extension tokens, each with ";"-separated parameters, a parameter's value being a
// token or a quoted string.
func parseExtensions(s string) ([]extension, error) {
	var out []extension
	i := 0
	skipSpace := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
	}
	token := func() string {
		j := i
		for i < len(s) && isTokenChar(s[i]) {
			i++
		}
		return s[j:i]
	}
	for {
		skipSpace()
		if i == len(s) {
			break
		}
		if s[i] == ',' { // empty list elements are allowed by the # rule
			i++
			continue
		}
		name := token()
		if name == "" {
			return nil, fmt.Errorf("bad extension list %q at byte %d", s, i)
		}
		ext := extension{name: name}
		for {
			skipSpace()
			if i == len(s) || s[i] == ',' {
				break
			}
			if s[i] != ';' {
				return nil, fmt.Errorf("bad extension list %q at byte %d", s, i)
			}
			i++
			skipSpace()
			p := extParam{name: token()}
			if p.name == "" {
				return nil, fmt.Errorf("bad extension parameter in %q at byte %d", s, i)
			}
			skipSpace()
			if i < len(s) && s[i] == '=' {
				i++
				skipSpace()
				p.hasValue = true
				if i < len(s) && s[i] == '"' {
					i++
					var b strings.Builder
					for {
						if i == len(s) {
							return nil, fmt.Errorf("unterminated quoted string in %q", s)
						}
						c := s[i]
						i++
						if c == '"' {
							break
						}
						if c == '\\' {
							if i == len(s) {
								return nil, fmt.Errorf("unterminated quoted string in %q", s)
							}
							c = s[i]
							i++
						}
						b.WriteByte(c)
					}
					p.value = b.String()
				} else {
					p.value = token()
				}
				if p.value == "" {
					return nil, fmt.Errorf("empty value of %s in %q", p.name, s)
				}
			}
			ext.params = append(ext.params, p)
		}
		out = append(out, ext)
	}
	return out, nil
}

func isTokenChar(c byte) bool {
	if c <= ' ' || c >= 0x7f {
		return false
	}
	return !strings.ContainsRune("()<>@,;:\\\"/[]?={}", rune(c))
}

// acceptDeflate checks the server's Sec-WebSocket-Extensions against the offer (RFC 7692 §5,
// §7.1). No extension at all means the server declined; anything that was not offered, a
// repeated or unknown parameter, a bad value, or server_no_context_takeover missing when it was
// asked for is an error.
func acceptDeflate(value string, noContext bool) (deflateParams, bool, error) {
	exts, err := parseExtensions(value)
	if err != nil {
		return deflateParams{}, false, err
	}
	if len(exts) == 0 {
		return deflateParams{}, false, nil
	}
	if len(exts) > 1 || !strings.EqualFold(exts[0].name, "permessage-deflate") {
		return deflateParams{}, false, fmt.Errorf("server chose extensions %q; only permessage-deflate was offered, once", value)
	}
	p := deflateParams{serverBits: maxWindowBits, clientBits: maxWindowBits, response: value}
	seen := map[string]bool{}
	for _, q := range exts[0].params {
		name := strings.ToLower(q.name)
		if seen[name] {
			return deflateParams{}, false, fmt.Errorf("permessage-deflate response %q repeats %s", value, name)
		}
		seen[name] = true
		switch name {
		case "server_no_context_takeover", "client_no_context_takeover":
			if q.hasValue {
				return deflateParams{}, false, fmt.Errorf("permessage-deflate response %q: %s takes no value", value, name)
			}
			if name == "server_no_context_takeover" {
				p.serverNoContext = true
			} else {
				p.clientNoContext = true
			}
		case "server_max_window_bits", "client_max_window_bits":
			bits, ok := windowBits(q)
			if !ok {
				return deflateParams{}, false, fmt.Errorf("permessage-deflate response %q: bad %s", value, name)
			}
			if name == "server_max_window_bits" {
				p.serverBits = bits
			} else {
				p.clientBits = bits
			}
		default:
			return deflateParams{}, false, fmt.Errorf("permessage-deflate response %q: unknown parameter %s", value, q.name)
		}
	}
	if noContext && !p.serverNoContext {
		return deflateParams{}, false, fmt.Errorf("permessage-deflate response %q lacks the server_no_context_takeover that was offered", value)
	}
	if noContext {
		p.clientNoContext = true // offered: we reset our compressor whatever the answer says
	}
	return p, true, nil
}

// windowBits reads a response's window-bits value: 8–15, decimal, no leading zero.
func windowBits(q extParam) (int, bool) {
	v := q.value
	if !q.hasValue || len(v) == 0 || len(v) > 2 || v[0] == '0' {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < minWindowBits || n > maxWindowBits {
		return 0, false
	}
	return n, true
}

// byteSink is the io.Writer under a flate.Writer: it appends to b, or drops what it gets while
// discard is set (priming a bounded window).
type byteSink struct {
	b       []byte
	discard bool
}

func (s *byteSink) Write(p []byte) (int, error) {
	if !s.discard {
		s.b = append(s.b, p...)
	}
	return len(p), nil
}

// deflater compresses the messages a connection sends.
type deflater struct {
	fw        *flate.Writer
	out       byteSink
	noContext bool
	window    int    // 1 << client_max_window_bits
	hist      []byte // with a bounded window and context takeover: the last window bytes sent
}

func newDeflater(p deflateParams) *deflater {
	return &deflater{noContext: p.clientNoContext, window: 1 << p.clientBits}
}

// compress appends the compressed payload of p (without the 00 00 ff ff tail) to dst. It
// reports false, leaving dst alone, when p must go out uncompressed.
func (d *deflater) compress(dst, p []byte) ([]byte, bool, error) {
	bounded := d.window < 1<<maxWindowBits
	if bounded && len(p) > d.window {
		return dst, false, nil
	}
	d.out = byteSink{b: dst}
	switch {
	case d.fw == nil:
		fw, err := flate.NewWriter(&d.out, flate.BestSpeed)
		if err != nil {
			return dst, false, err
		}
		d.fw = fw
	case d.noContext || bounded:
		d.fw.Reset(&d.out)
	}
	if bounded && !d.noContext && len(d.hist) > 0 {
		if keep := d.window - len(p); keep > 0 {
			d.out.discard = true
			_, err := d.fw.Write(d.hist[max(0, len(d.hist)-keep):])
			if err == nil {
				err = d.fw.Flush()
			}
			d.out.discard = false
			if err != nil {
				return dst, false, err
			}
		}
	}
	start := len(dst)
	_, err := d.fw.Write(p)
	if err == nil {
		err = d.fw.Flush()
	}
	b := d.out.b
	d.out.b = nil
	if err != nil {
		return dst, false, err
	}
	if len(b)-start < 4 || string(b[len(b)-4:]) != string(syncTail) {
		return dst, false, errors.New("compress/flate did not end the message with a sync flush")
	}
	if bounded && !d.noContext {
		d.hist = slide(d.hist, p, d.window)
	}
	return b[:len(b)-4], true, nil
}

// release drops the compressor (the connection will send no more data messages).
func (d *deflater) release() {
	d.fw = nil
	d.hist = nil
}

// srcReader is the source of the flate reader: a message's payload, the sync tail that the
// sender removed, and then, only if the reader asks for more, an empty final block. It is an
// io.ByteReader, so that flate reads it directly, without a bufio.Reader of its own.
type srcReader struct {
	parts [3][]byte // payload, syncTail, finalBlock
	i     int
}

var finalBlock = []byte{0x01, 0x00, 0x00, 0xff, 0xff}

func (r *srcReader) reset(p []byte) {
	*r = srcReader{parts: [3][]byte{p, syncTail, finalBlock}}
}

func (r *srcReader) next() bool {
	for r.i < len(r.parts) && len(r.parts[r.i]) == 0 {
		r.i++
	}
	return r.i < len(r.parts)
}

func (r *srcReader) Read(b []byte) (int, error) {
	if !r.next() {
		return 0, io.EOF
	}
	n := copy(b, r.parts[r.i])
	r.parts[r.i] = r.parts[r.i][n:]
	return n, nil
}

func (r *srcReader) ReadByte() (byte, error) {
	if !r.next() {
		return 0, io.EOF
	}
	c := r.parts[r.i][0]
	r.parts[r.i] = r.parts[r.i][1:]
	return c, nil
}

// atSync reports whether the payload and the sync tail are consumed and the final block is
// untouched: the reader stopped at the message's sync point, ready for the next message.
func (r *srcReader) atSync() bool {
	return len(r.parts[0]) == 0 && len(r.parts[1]) == 0 && len(r.parts[2]) == len(finalBlock)
}

// inflater decompresses the messages a connection receives.
type inflater struct {
	fr        io.ReadCloser
	src       srcReader
	noContext bool   // server_no_context_takeover: every message starts with an empty window
	win       []byte // with context takeover: the last 32 KiB inflated, to restart after a final block
	restart   bool   // the stream ended with a final block: the next message restarts from win
	out       []byte // more than the reader's 32 KiB window, so one Read empties it at a sync point
}

func newInflater(p deflateParams) *inflater {
	return &inflater{noContext: p.serverNoContext}
}

// inflate decompresses one message's payload, handing its output to emit in pieces, and returns
// the inflated size. More than limit bytes of
// output is an error, reported as soon as it is passed.
func (f *inflater) inflate(comp []byte, limit int64, emit func([]byte) error) (int64, error) {
	if len(comp) == 0 {
		return 0, nil // not valid deflate, but an empty message is what it can only mean
	}
	if f.out == nil {
		f.out = make([]byte, 1<<maxWindowBits+1)
	}
	f.src.reset(comp)
	switch {
	case f.fr == nil:
		f.fr = flate.NewReader(&f.src)
	case f.noContext:
		_ = f.fr.(flate.Resetter).Reset(&f.src, nil)
	case f.restart:
		_ = f.fr.(flate.Resetter).Reset(&f.src, f.win)
		f.restart = false
	}
	var total int64
	for {
		n, err := f.fr.Read(f.out)
		if n > 0 {
			total += int64(n)
			if total > limit {
				return total, fmt.Errorf("message inflates past %d bytes", limit)
			}
			if !f.noContext {
				f.win = slide(f.win, f.out[:n], 1<<maxWindowBits)
			}
			if err := emit(f.out[:n]); err != nil {
				return total, err
			}
		}
		switch {
		case err == io.EOF:
			// A final block: ours, when the sync point handed out nothing, or the server's.
			// The reader is done; the next message restarts it from the window.
			f.restart = !f.noContext
			return total, nil
		case err != nil:
			return total, perr("inflating a compressed message: %v", err)
		case f.src.atSync():
			// The sync tail, an empty stored block, made the reader hand out everything it
			// held; it now waits for the next message's bytes, its window intact.
			return total, nil
		}
	}
}

// slide appends p to buf and keeps at least its last size bytes, with up to size bytes of
// slack so that moving them is rare.
func slide(buf, p []byte, size int) []byte {
	if len(p) >= size {
		if cap(buf) < size {
			buf = make([]byte, 0, 2*size)
		}
		return append(buf[:0], p[len(p)-size:]...)
	}
	if len(buf)+len(p) > 2*size {
		keep := size - len(p)
		buf = buf[:copy(buf, buf[len(buf)-keep:])]
	}
	if buf == nil {
		buf = make([]byte, 0, min(2*size, max(4*len(p), 4096)))
	}
	return append(buf, p...)
}
