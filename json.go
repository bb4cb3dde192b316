package gust

import (
	"encoding/json"
	"sync"

	"github.com/gustws/gust/internal/bufpool"
)

// WriteJSON sends v, encoded as json.Marshal would, as one text message,
// written as WriteMessage writes. The encoding goes into a pooled buffer,
// so WriteJSON allocates only what encoding/json does for v. When v cannot
// be encoded, it returns encoding/json's error and sends nothing.
func (c *Conn) WriteJSON(v any) error {
	e, _ := jsonEncoders.Get().(*jsonEncoder)
	if e == nil {
		e = new(jsonEncoder)
		e.enc = json.NewEncoder(e)
	}
	err := e.enc.Encode(v)
	if err == nil && e.buf != nil {
		p := *e.buf
		// Encode ends the value with a newline; json.Marshal does not.
		if n := len(p); n > 0 && p[n-1] == '\n' {
			p = p[:n-1]
		}
		err = c.writeMessage(OpText, p, true)
	}
	bufpool.Put(e.buf) // Put(nil) does nothing
	e.buf = nil
	jsonEncoders.Put(e)
	return err
}

// jsonEncoder is a json.Encoder that writes into a pooled buffer, pooled
// together. Write never fails, so an Encoder stays usable after an error.
type jsonEncoder struct {
	enc *json.Encoder
	buf *[]byte
}

var jsonEncoders sync.Pool

// Write is called once per Encode, with the whole encoding.
func (e *jsonEncoder) Write(p []byte) (int, error) {
	n := 0
	if e.buf != nil {
		n = len(*e.buf)
	}
	e.buf = bufpool.Grow(e.buf, n+len(p))
	copy((*e.buf)[n:], p)
	return len(p), nil
}

// DecodeJSON decodes Data into v with json.Unmarshal, for text and binary
// messages alike. It does not Close the message, which may be closed as
// soon as it returns (v keeps no reference to Data). A closed or streamed
// message has no Data: decode a streamed one with
// json.NewDecoder(m).Decode(v).
func (m *Message) DecodeJSON(v any) error {
	return json.Unmarshal(m.Data, v)
}
