package gust

import (
	"encoding/json"
	"sync"

	"github.com/gustws/gust/internal/bufpool"
)

// WriteJSON sends v, encoded by encoding/json as json.Marshal would encode
// it, as one text message, compressed as WriteMessage would compress it.
//
// The encoding goes into a pooled buffer that is given back once the
// message is written, so WriteJSON allocates only what encoding/json does
// for v itself. When v cannot be encoded (a channel, a func, a cycle),
// WriteJSON returns the error of encoding/json and sends nothing. On a
// closed connection it returns net.ErrClosed, as every write does.
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

// jsonEncoder is a json.Encoder that writes into a pooled buffer. Both are
// kept together in jsonEncoders, so that WriteJSON allocates neither. An
// Encoder stays usable after an encoding error: it only remembers the
// errors of its writer, and Write never fails.
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

// DecodeJSON decodes the message's Data into v with json.Unmarshal. It
// accepts text and binary messages alike: JSON is normally sent as text,
// but some peers send it as binary. It does not Close the message; v keeps
// no reference to Data (encoding/json copies what it keeps, and a
// json.Unmarshaler must too), so the
// message may be closed as soon as DecodeJSON returns. On a closed message
// (Data is nil) it returns the error json.Unmarshal returns for empty input;
// so it does on a streamed one, which has no Data: decode that with
// json.NewDecoder(m).Decode(v).
func (m *Message) DecodeJSON(v any) error {
	return json.Unmarshal(m.Data, v)
}
