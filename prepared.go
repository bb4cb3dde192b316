package gust

import (
	"sync"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/deflate"
)

// PreparedMessage is a message framed once and written to any number of
// server connections: the frame is built once, and compressed once per
// distinct compression setting the receivers negotiated, so that a
// broadcast costs one copy per receiver and no allocation.
//
// Make one with NewPreparedMessage: a zero PreparedMessage has no type, and
// WritePrepared refuses it. A PreparedMessage is safe for concurrent use
// and must not be changed after it is made. It is for messages a server sends; client connections
// (which mask each frame) frame it themselves.
type PreparedMessage struct {
	op      Opcode
	payload []byte
	plain   []byte // header and payload, unmasked

	mu         sync.Mutex
	compressed map[deflate.Setting][]byte // header and deflated payload, RSV1 set
}

// NewPreparedMessage frames p as a message of type op (OpText or OpBinary).
// It keeps its own copy of p.
func NewPreparedMessage(op Opcode, p []byte) (*PreparedMessage, error) {
	if op != OpText && op != OpBinary {
		return nil, errBadOpcode
	}
	var hdr [maxHeaderSize]byte
	hn := putHeader(hdr[:], op, len(p), false, [4]byte{})
	plain := make([]byte, hn+len(p))
	copy(plain, hdr[:hn])
	copy(plain[hn:], p)
	return &PreparedMessage{op: op, payload: plain[hn:], plain: plain}, nil
}

// Opcode returns the message type.
func (pm *PreparedMessage) Opcode() Opcode { return pm.op }

// Payload returns the message's bytes; they must not be changed.
func (pm *PreparedMessage) Payload() []byte { return pm.payload }

// frameFor returns the compressed frame for d's setting, compressing it the
// first time it is asked for. The payload is compressed from an empty
// window, so any receiver can take it, whatever its context.
func (pm *PreparedMessage) frameFor(d *deflate.State) ([]byte, error) {
	key := d.Setting()
	pm.mu.Lock()
	defer pm.mu.Unlock()
	if f, ok := pm.compressed[key]; ok {
		return f, nil
	}
	buf, n, err := d.CompressAlone(pm.payload)
	if err != nil {
		return nil, err
	}
	z := (*buf)[:n]
	var hdr [maxHeaderSize]byte
	hn := putHeader(hdr[:], pm.op|rsv1, len(z), false, [4]byte{})
	f := make([]byte, hn+len(z))
	copy(f, hdr[:hn])
	copy(f[hn:], z)
	bufpool.Put(buf)
	if pm.compressed == nil {
		pm.compressed = make(map[deflate.Setting][]byte)
	}
	pm.compressed[key] = f
	return f, nil
}
