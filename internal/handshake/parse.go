// Package handshake is the WebSocket opening handshake (RFC 6455 section 4,
// RFC 8441 over HTTP/2) as pure functions over bytes, strings and
// net/http's types: it parses the HTTP/1.1 request head on gust's own
// server, checks a request ([CheckRequest]) and writes or sets the answers,
// accepting or refusing, and builds the client's request and checks the
// server's answer. It knows nothing of connections.
//
// [Parse] works on a byte slice the caller has read, so the caller can
// keep any bytes that follow the head (a client may send its first frames
// without waiting for the response). It is deliberately strict; see Parse
// for what it rejects. [ReadHead] reads that slice from an io.Reader, into
// a pooled buffer.
package handshake

import (
	"bytes"
	"errors"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// Request is a parsed HTTP request head.
type Request struct {
	Method     string // the method token, as sent (case-sensitive)
	RequestURI string // the request-target, as sent
	Proto      string // "HTTP/1.1" or "HTTP/1.0"

	// Header holds the header fields under their canonical keys (see
	// [textproto.CanonicalMIMEHeaderKey]), values trimmed of leading and
	// trailing spaces and tabs, repeated fields in the order received.
	Header http.Header
}

// ErrIncomplete is returned by [Parse] when the buffer does not yet hold a
// complete request head: read more and call Parse again with everything
// read so far.
var ErrIncomplete = errors.New("handshake: incomplete request head")

// Error is a request head that cannot be served. Status is the HTTP status
// code to answer with; Reason says what was wrong.
type Error struct {
	Status int
	Reason string
}

// Error returns a message naming the status and the reason.
func (e *Error) Error() string {
	return "handshake: " + strconv.Itoa(e.Status) + " " + http.StatusText(e.Status) + ": " + e.Reason
}

func badRequest(reason string) *Error {
	return &Error{Status: http.StatusBadRequest, Reason: reason}
}

func tooLarge() *Error {
	return &Error{Status: http.StatusRequestHeaderFieldsTooLarge, Reason: "request head too large"}
}

// Parse parses one request head from the start of buf. It returns the
// request and n, the number of bytes the head used, up to and including
// the empty line that ends it; bytes from buf[n:] on belong to the
// connection, not to the head.
//
// When buf holds no complete head, Parse returns [ErrIncomplete]. When
// maxBytes > 0 and the head is longer than maxBytes bytes, or is incomplete
// and buf is already longer, Parse returns an [*Error] with status 431.
// Malformed heads give status 400, and a version other than HTTP/1.x gives
// 505. Lines are checked as they complete, so a malformed line is reported
// even before the rest of the head arrives.
//
// Parse is strict:
//   - every line must end in CRLF; a bare LF or CR is rejected, and so
//     are empty lines before the request line;
//   - the request line must be exactly method, request-target and
//     HTTP-version separated by single spaces; the method must be a token
//     and the target visible ASCII;
//   - header names must be tokens, directly followed by the colon;
//   - header values must not contain control characters other than tab
//     (in particular no NUL, CR or LF); bytes 0x80 and up are allowed;
//   - obsolete line folding (a line starting with a space or tab) is
//     rejected.
//
// Parse does not check the semantics of the head (for example that a Host
// field is present); that is the caller's business.
func Parse(buf []byte, maxBytes int) (*Request, int, error) {
	n, headers, err := scan(buf, maxBytes)
	if err != nil {
		return nil, 0, err
	}
	return build(string(buf[:n]), headers), n, nil
}

// scan finds the end of the head at the start of buf and checks the syntax
// of every line in it. It returns the length of the head and the number of
// header fields.
func scan(buf []byte, maxBytes int) (n, headers int, err error) {
	for line := 0; ; line++ {
		lf := bytes.IndexByte(buf[n:], '\n')
		if lf < 0 {
			if maxBytes > 0 && len(buf) > maxBytes {
				return 0, 0, tooLarge()
			}
			return 0, 0, ErrIncomplete
		}
		end := n + lf + 1 // just past the LF
		if maxBytes > 0 && end > maxBytes {
			return 0, 0, tooLarge()
		}
		if lf == 0 || buf[n+lf-1] != '\r' {
			return 0, 0, badRequest("line not terminated by CRLF")
		}
		text := buf[n : n+lf-1]
		n = end
		switch {
		case line == 0:
			if err := checkRequestLine(text); err != nil {
				return 0, 0, err
			}
		case len(text) == 0:
			return n, line - 1, nil
		default:
			if err := checkHeaderLine(text); err != nil {
				return 0, 0, err
			}
		}
	}
}

func checkRequestLine(line []byte) error {
	if len(line) == 0 {
		return badRequest("empty request line")
	}
	method, target, version, ok := splitRequestLine(line)
	if !ok {
		return badRequest("request line is not method, target and version separated by single spaces")
	}
	if !isToken(method) {
		return badRequest("invalid method")
	}
	for _, c := range target {
		if c <= ' ' || c >= 0x7f {
			return badRequest("invalid character in request-target")
		}
	}
	// HTTP-version = "HTTP/" DIGIT "." DIGIT (RFC 9112 section 2.3).
	if len(version) != len("HTTP/1.1") || string(version[:5]) != "HTTP/" ||
		!isDigit(version[5]) || version[6] != '.' || !isDigit(version[7]) {
		return badRequest("malformed HTTP version")
	}
	if version[5] != '1' {
		return &Error{Status: http.StatusHTTPVersionNotSupported, Reason: "unsupported HTTP version " + string(version)}
	}
	return nil
}

func checkHeaderLine(line []byte) error {
	if line[0] == ' ' || line[0] == '\t' {
		return badRequest("obsolete line folding")
	}
	name, value, ok := splitHeaderLine(line)
	if !ok {
		return badRequest("header line without colon")
	}
	if !isToken(name) {
		// This also catches whitespace between the name and the colon.
		return badRequest("invalid header name")
	}
	for _, c := range value {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return badRequest("invalid character in header value")
		}
	}
	return nil
}

// build makes the Request from a head that scan has accepted; head holds
// exactly the bytes of the head, and every string in the Request is a
// substring of it, so the whole head costs one string allocation.
func build(head string, headers int) *Request {
	line, rest := cutLine(head)
	method, target, version, _ := splitRequestLine(line)
	req := &Request{
		Method:     method,
		RequestURI: target,
		Proto:      version,
		Header:     make(http.Header, headers),
	}
	// One backing array for the first value of every field. Each key gets
	// a one-element slice with capacity one, so appending a repeated
	// field's value reallocates instead of overwriting a neighbour.
	values := make([]string, headers)
	for i := 0; ; i++ {
		line, rest = cutLine(rest)
		if line == "" {
			return req
		}
		name, value, _ := splitHeaderLine(line)
		key := canonicalKey(name)
		if vs, ok := req.Header[key]; ok {
			req.Header[key] = append(vs, value)
			continue
		}
		values[i] = value
		req.Header[key] = values[i : i+1 : i+1]
	}
}

// cutLine splits off the first CRLF-terminated line of s.
func cutLine(s string) (line, rest string) {
	i := strings.IndexByte(s, '\n')
	return s[:i-1], s[i+1:]
}

// splitRequestLine splits a request line at its two spaces. It reports
// false unless there are exactly two spaces and three non-empty parts.
func splitRequestLine[T ~string | ~[]byte](line T) (method, target, version T, ok bool) {
	sp1 := indexByte(line, ' ')
	if sp1 <= 0 {
		return method, target, version, false
	}
	sp2 := indexByte(line[sp1+1:], ' ')
	if sp2 <= 0 {
		return method, target, version, false
	}
	sp2 += sp1 + 1
	method, target, version = line[:sp1], line[sp1+1:sp2], line[sp2+1:]
	if len(version) == 0 || indexByte(version, ' ') >= 0 {
		return method, target, version, false
	}
	return method, target, version, true
}

// splitHeaderLine splits a header line at its first colon and trims
// optional whitespace around the value.
func splitHeaderLine[T ~string | ~[]byte](line T) (name, value T, ok bool) {
	colon := indexByte(line, ':')
	if colon < 0 {
		return name, value, false
	}
	return line[:colon], trimOWS(line[colon+1:]), true
}

func trimOWS[T ~string | ~[]byte](s T) T {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// indexByte finds c in the short spans of a line (the request line's
// spaces, a header's colon), where a plain loop serves both the []byte and
// the string pass. Whole lines are found with bytes and strings.IndexByte.
func indexByte[T ~string | ~[]byte](s T, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// tchar marks the bytes allowed in a token (RFC 9110 section 5.6.2):
// "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" /
// "`" / "|" / "~" / DIGIT / ALPHA.
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// isToken reports whether s is a non-empty token.
func isToken[T ~string | ~[]byte](s T) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tchar[s[i]] {
			return false
		}
	}
	return true
}

// commonKeys interns the canonical form of the header names a WebSocket
// upgrade request usually carries, so that canonicalizing them does not
// allocate.
var commonKeys = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{
		"Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control",
		"Connection", "Cookie", "Host", "Origin", "Pragma", "Sec-Websocket-Extensions",
		"Sec-Websocket-Key", "Sec-Websocket-Protocol", "Sec-Websocket-Version",
		"Upgrade", "User-Agent", "X-Forwarded-For", "X-Forwarded-Proto", "X-Real-Ip",
	} {
		m[k] = k
	}
	return m
}()

// canonicalKey returns the canonical form of a header name that is a
// valid token, like textproto.CanonicalMIMEHeaderKey. A name that is
// already canonical is returned as is (it is a substring of the head, so
// no allocation), as is the interned form of a common name.
func canonicalKey(name string) string {
	var buf [64]byte
	if len(name) > len(buf) {
		return textproto.CanonicalMIMEHeaderKey(name)
	}
	b := buf[:len(name)]
	changed := false
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
			changed = true
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
			changed = true
		}
		b[i] = c
		upper = c == '-'
	}
	if !changed {
		return name
	}
	if k, ok := commonKeys[string(b)]; ok {
		return k
	}
	return string(b)
}
