package handshake

import "net/http"

// The client's side of the opening handshake (RFC 6455 §4.1).

// ClientFields returns a copy of header with the fields of the opening
// handshake that HTTP/1.1 and HTTP/2 share: Sec-WebSocket-Version, and
// Sec-WebSocket-Protocol and Sec-WebSocket-Extensions unless subprotocols
// and extensions are "".
func ClientFields(header http.Header, subprotocols, extensions string) http.Header {
	h := header.Clone()
	if h == nil {
		h = make(http.Header)
	}
	h.Set("Sec-WebSocket-Version", "13")
	if subprotocols != "" {
		h.Set("Sec-WebSocket-Protocol", subprotocols)
	}
	if extensions != "" {
		h.Set("Sec-WebSocket-Extensions", extensions)
	}
	return h
}
