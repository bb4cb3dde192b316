package gust

import (
	"sync"

	"github.com/gustws/gust/internal/bufpool"
	"github.com/gustws/gust/internal/deflate"
	"github.com/gustws/gust/internal/wsframe"
)

// PreparedMessage is a message framed once (and compressed once per
// distinct compression setting of its receivers) and written to any number
// of connections with WritePrepared: a broadcast costs one copy per
// receiver and no allocation. Client connections, which mask every frame,
// frame it themselves. Make one with NewPreparedMessage (WritePrepared
// refuses a zero one); it is safe for concurrent use and immutable.
type PreparedMessage struct {
	op      Opcode
	payload []byte
	plain   []byte // header and payload, unmasked

	mu         sync.Mutex
	compressed map[deflate.Setting][]byte // header and deflated payload, RSV1 set

	fan fanout // where its fan-out stands among the others (outbox.go)
}

// NewPreparedMessage frames p as a message of type op (OpText or OpBinary).
// It keeps its own copy of p.
func NewPreparedMessage(op Opcode, p []byte) (*PreparedMessage, error) {
	if op != OpText && op != OpBinary {
		return nil, errBadOpcode
	}
	plain := newFrame(op, p)
	return &PreparedMessage{op: op, payload: plain[len(plain)-len(p):], plain: plain}, nil
}

// newFrame returns a new unmasked frame of p.
func newFrame(op Opcode, p []byte) []byte {
	var hdr [wsframe.MaxHeaderSize]byte
	hn := wsframe.Put(hdr[:], op, len(p), false, [4]byte{})
	f := make([]byte, hn+len(p))
	copy(f, hdr[:hn])
	copy(f[hn:], p)
	return f
}

// Opcode returns the message type.
func (pm *PreparedMessage) Opcode() Opcode { return pm.op }

// Payload returns the message's bytes; they must not be changed.
func (pm *PreparedMessage) Payload() []byte { return pm.payload }

// frameFor returns the compressed frame for d's setting, made on first
// use from an empty window, so that any receiver can take it.
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
	f := newFrame(pm.op|rsv1, (*buf)[:n])
	bufpool.Put(buf)
	if pm.compressed == nil {
		pm.compressed = make(map[deflate.Setting][]byte)
	}
	pm.compressed[key] = f
	return f, nil
}
