package handshake

import (
	"crypto/sha1"
	"encoding/base64"
	"net/http"
	"net/textproto"
	"strings"
)

// keyGUID is the fixed suffix of RFC 6455 section 1.3.
const keyGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// AcceptKey returns the Sec-WebSocket-Accept value that answers the
// client's Sec-WebSocket-Key challengeKey: the base64 encoding of the
// SHA-1 hash of the key followed by the RFC 6455 GUID.
func AcceptKey(challengeKey string) string {
	var buf [96]byte // room for a 24-character key and the GUID on the stack
	sum := sha1.Sum(append(append(buf[:0], challengeKey...), keyGUID...))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// ValidKey reports whether key is a well-formed Sec-WebSocket-Key: the
// standard base64 encoding (with padding) of exactly 16 bytes, as RFC 6455
// section 4.1 requires of clients.
func ValidKey(key string) bool {
	// 16 bytes always encode to 24 characters. Checking that first also
	// rules out the CR and LF that the base64 decoder would skip.
	if len(key) != 24 {
		return false
	}
	var dst [18]byte // base64.StdEncoding.DecodedLen(24)
	n, err := base64.StdEncoding.Decode(dst[:], []byte(key))
	return err == nil && n == 16
}

// HasToken reports whether any value of the header field name in h, split
// on commas and trimmed of spaces and tabs, equals token, ignoring ASCII
// case. For example HasToken(h, "Connection", "upgrade") is true for
// "Connection: keep-alive, Upgrade". Empty elements never match.
func HasToken(h http.Header, name, token string) bool {
	for _, v := range h[textproto.CanonicalMIMEHeaderKey(name)] {
		for v != "" {
			var t string
			t, v, _ = strings.Cut(v, ",")
			if t = trimOWS(t); t != "" && strings.EqualFold(t, token) {
				return true
			}
		}
	}
	return false
}

// Tokens returns the comma-separated elements of every value of the
// header field name in h, trimmed of spaces and tabs, in order, skipping
// empty ones. It returns nil if there are none.
func Tokens(h http.Header, name string) []string {
	var tokens []string
	for _, v := range h[textproto.CanonicalMIMEHeaderKey(name)] {
		for v != "" {
			var t string
			t, v, _ = strings.Cut(v, ",")
			if t = trimOWS(t); t != "" {
				tokens = append(tokens, t)
			}
		}
	}
	return tokens
}

// ValidFieldName reports whether name can be sent as a header field name:
// a non-empty token (RFC 9110 section 5.1).
func ValidFieldName(name string) bool { return isToken(name) }

// IsToken reports whether s is a non-empty token (RFC 9110 section
// 5.6.2), as a subprotocol must be (RFC 6455 section 4.1).
func IsToken(s string) bool { return isToken(s) }

// ValidFieldValue reports whether v can be sent as a header field value
// (RFC 9110 section 5.5): no control characters other than tab, so in
// particular no CR or LF that would end the field, or the head, early.
// Bytes 0x80 and up are allowed.
func ValidFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
