package handshake

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// The server's side of the opening handshake, over net/http's types: the
// checks of a request (RFC 6455 §4.2.1, RFC 8441 §4), the subprotocol, and
// the answers, accepting or refusing, as bytes or as header fields.

// CheckRequest checks an opening handshake request, over HTTP/1.1 or
// HTTP/2, and returns its Sec-WebSocket-Key ("" over HTTP/2), or the status
// and reason to refuse it with: 405 for another method, 426 for another
// version than 13, 403 when checkOrigin refuses it, 400 for the rest. A nil
// checkOrigin accepts requests without an Origin header and requests whose
// Origin host is the request's Host. The origin is checked last, so that
// checkOrigin sees only requests that are handshakes.
func CheckRequest(r *http.Request, checkOrigin func(*http.Request) bool) (key string, err *Error) {
	if r.ProtoMajor == 2 {
		err = checkH2(r)
	} else {
		err = checkH1(r)
	}
	if err != nil {
		return "", err
	}
	if v := r.Header.Values("Sec-WebSocket-Version"); len(v) != 1 || v[0] != "13" {
		return "", &Error{Status: http.StatusUpgradeRequired, Reason: "unsupported version; this server speaks 13"}
	}
	if r.ProtoMajor != 2 {
		key = r.Header.Get("Sec-WebSocket-Key")
		if len(r.Header.Values("Sec-WebSocket-Key")) != 1 || !ValidKey(key) {
			return "", badRequest("missing or invalid Sec-WebSocket-Key")
		}
	}
	if checkOrigin == nil {
		checkOrigin = sameOrigin
	}
	if !checkOrigin(r) {
		return "", &Error{Status: http.StatusForbidden, Reason: "origin not allowed"}
	}
	return key, nil
}

// checkH2 checks what RFC 8441 §4 asks of the request over HTTP/2: an
// extended CONNECT with :protocol websocket (and no Upgrade, Connection or
// Sec-WebSocket-Key, which are not checked).
func checkH2(r *http.Request) *Error {
	if r.Method != http.MethodConnect {
		return &Error{Status: http.StatusMethodNotAllowed, Reason: "over HTTP/2 the handshake method must be CONNECT"}
	}
	if !strings.EqualFold(r.Header.Get(":protocol"), "websocket") {
		return badRequest(":protocol must be websocket")
	}
	return nil
}

// checkH1 checks the method, version, Connection and Upgrade fields of a
// request over HTTP/1.x, and that it has no body.
func checkH1(r *http.Request) *Error {
	if r.Method != http.MethodGet {
		return &Error{Status: http.StatusMethodNotAllowed, Reason: "handshake method must be GET"}
	}
	if !r.ProtoAtLeast(1, 1) {
		return badRequest("handshake needs HTTP/1.1")
	}
	if !HasToken(r.Header, "Connection", "upgrade") {
		return badRequest("Connection header must contain upgrade")
	}
	if !HasToken(r.Header, "Upgrade", "websocket") {
		return badRequest("Upgrade header must be websocket")
	}
	// The handshake is a GET (RFC 6455 §4.1), whose content has no defined
	// meaning (RFC 9110 §9.3.1), and the bytes after the head are read as
	// WebSocket frames: a body would be taken for frames. net/http passes
	// such a request on, so the check is ours. Over HTTP/2 the stream's
	// data is the WebSocket connection itself.
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return badRequest("handshake request must not have a body")
	}
	return nil
}

// sameOrigin accepts requests without an Origin header and requests whose
// Origin host is the request's Host.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Values("Origin")
	if len(origin) == 0 {
		return true
	}
	u, err := url.Parse(origin[0])
	if err != nil {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// SelectSubprotocol returns the first of supported, in its order of
// preference, that the request's Sec-WebSocket-Protocol offers, or "".
func SelectSubprotocol(supported []string, h http.Header) string {
	if len(supported) == 0 {
		return ""
	}
	offered := Tokens(h, "Sec-WebSocket-Protocol")
	for _, p := range supported {
		if slices.Contains(offered, p) {
			return p
		}
	}
	return ""
}

// ChosenSubprotocol takes the Sec-WebSocket-Protocol field out of extra,
// where the application's OnRequest may have set it, and returns its
// value, or "" when there is none. The value must be one of the
// subprotocols the client offered in req (RFC 6455 §4.2.2): a client fails
// a handshake that names another.
func ChosenSubprotocol(req, extra http.Header) (string, error) {
	var chosen []string
	for k, v := range extra {
		if strings.EqualFold(k, "Sec-WebSocket-Protocol") {
			chosen = append(chosen, v...)
			delete(extra, k)
		}
	}
	if chosen == nil {
		return "", nil
	}
	offered := Tokens(req, "Sec-WebSocket-Protocol")
	if len(chosen) != 1 || !slices.Contains(offered, chosen[0]) {
		return "", fmt.Errorf("OnRequest chose the subprotocol %q; the client offered %q", chosen, offered)
	}
	return chosen[0], nil
}

// The fields the handshake writes itself, which are skipped in those the
// application gives: a 101 (or an HTTP/2 200) has its own Upgrade,
// Connection and Sec-WebSocket fields and no content (RFC 9110 §8.6), and a
// refusal's length and connection handling are the server's.
var (
	responseFields = [...]string{
		"Upgrade", "Connection", "Sec-WebSocket-Accept", "Sec-WebSocket-Protocol",
		"Sec-WebSocket-Extensions", "Content-Length", "Transfer-Encoding",
	}
	refusalFields = [...]string{"Connection", "Content-Length", "Transfer-Encoding"}
)

// ResponseOwn reports whether an accepting response writes the field name
// itself; RefusalOwn, whether a refusal does.
func ResponseOwn(name string) bool { return hasFold(responseFields[:], name) }
func RefusalOwn(name string) bool  { return hasFold(refusalFields[:], name) }

func hasFold(names []string, name string) bool {
	for _, n := range names {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

// CheckFields returns an error naming the first field of h that would
// corrupt the response it goes into: a name that is not a token, or a
// value with a control character (CR or LF would end the field early and
// let the value write fields, or a body, of its own). Fields own reports
// are skipped, as the answers skip them.
func CheckFields(h http.Header, own func(string) bool) error {
	for k, vs := range h {
		if own(k) {
			continue
		}
		if !ValidFieldName(k) {
			return fmt.Errorf("invalid field name %q", k)
		}
		for _, v := range vs {
			if !ValidFieldValue(v) {
				return fmt.Errorf("invalid value %q in field %s", v, k)
			}
		}
	}
	return nil
}

// AppendResponse appends to b the 101 response that accepts the handshake
// of key, with Sec-WebSocket-Protocol and Sec-WebSocket-Extensions unless
// subprotocol and extensions are "", then the fields of each of fields that
// ResponseOwn does not report, which CheckFields has passed.
func AppendResponse(b []byte, key, subprotocol, extensions string, fields ...http.Header) []byte {
	b = append(b, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "...)
	b = append(b, AcceptKey(key)...)
	b = append(b, "\r\n"...)
	if subprotocol != "" {
		b = append(b, "Sec-WebSocket-Protocol: "...)
		b = append(b, subprotocol...)
		b = append(b, "\r\n"...)
	}
	if extensions != "" {
		b = append(b, "Sec-WebSocket-Extensions: "...)
		b = append(b, extensions...)
		b = append(b, "\r\n"...)
	}
	for _, h := range fields {
		b = appendFields(b, h, ResponseOwn)
	}
	return append(b, "\r\n"...)
}

// SetResponse makes h the header of the HTTP/2 response that accepts a
// handshake (RFC 8441 §5): h's fields that ResponseOwn reports are
// removed, Sec-WebSocket-Protocol and Sec-WebSocket-Extensions are set
// unless subprotocol and extensions are "", and the fields of each of
// fields that ResponseOwn does not report are added.
func SetResponse(h http.Header, subprotocol, extensions string, fields ...http.Header) {
	for k := range h {
		if ResponseOwn(k) {
			delete(h, k)
		}
	}
	if subprotocol != "" {
		h.Set("Sec-WebSocket-Protocol", subprotocol)
	}
	if extensions != "" {
		h.Set("Sec-WebSocket-Extensions", extensions)
	}
	for _, more := range fields {
		for k, v := range more {
			if !ResponseOwn(k) {
				h[k] = append(h[k], v...)
			}
		}
	}
}

// SetRefusal makes h the header of a refusal answered through net/http:
// the fields of fields that RefusalOwn does not report replace those of
// the same name, Transfer-Encoding is removed and Content-Length is
// bodyLen.
func SetRefusal(h, fields http.Header, bodyLen int) {
	for k, v := range fields {
		if !RefusalOwn(k) {
			h[k] = v
		}
	}
	h.Del("Transfer-Encoding")
	h.Set("Content-Length", strconv.Itoa(bodyLen))
}

// AppendError appends to b a complete HTTP error response with a text
// body of reason, for a server that does not go through net/http: the
// answer to a request that is not an acceptable handshake.
func AppendError(b []byte, status int, reason string) []byte {
	b = appendStatusLine(b, status)
	b = append(b, "Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"...)
	switch status {
	case http.StatusUpgradeRequired:
		b = append(b, "Sec-WebSocket-Version: 13\r\n"...)
	case http.StatusMethodNotAllowed:
		b = append(b, "Allow: GET\r\n"...)
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(reason)+1), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, reason...)
	return append(b, '\n')
}

// AppendRefusal appends to b the head of a refusal the application chose,
// for a server that does not go through net/http: status, Connection:
// close (the connection ends), the fields of header that RefusalOwn does
// not report, and the Content-Length of body, which follows the head.
// Without a Content-Type of its own, a body gets the one net/http would
// give it.
func AppendRefusal(b []byte, status int, header http.Header, body []byte) []byte {
	b = appendStatusLine(b, status)
	b = append(b, "Connection: close\r\n"...)
	if len(body) > 0 && header.Get("Content-Type") == "" {
		b = append(b, "Content-Type: "...)
		b = append(b, http.DetectContentType(body)...)
		b = append(b, "\r\n"...)
	}
	b = appendFields(b, header, RefusalOwn)
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	return append(b, "\r\n\r\n"...)
}

// appendFields appends the fields of h that own does not report, which
// CheckFields has passed, one line per value.
func appendFields(b []byte, h http.Header, own func(string) bool) []byte {
	for k, vs := range h {
		if own(k) {
			continue
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

// appendStatusLine appends an HTTP/1.1 status line.
func appendStatusLine(b []byte, status int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(status)...)
	return append(b, "\r\n"...)
}

// HTTPRequest makes the *http.Request of a head that [Parse] returned, as
// net/http would hand it to a handler, refusing with 400 what net/http
// refuses before a handler runs: an HTTP/1.1 request needs exactly one Host
// field (RFC 9112 §3.2), and Content-Length must be a number.
// Content-Length and Transfer-Encoding fill the fields net/http fills, so
// that CheckRequest sees a body the same way whichever server parsed the
// head. remoteAddr is the client's address.
func (req *Request) HTTPRequest(remoteAddr string) (*http.Request, *Error) {
	u, err := url.ParseRequestURI(req.RequestURI)
	if err != nil {
		return nil, badRequest("invalid request target")
	}
	major, minor, ok := http.ParseHTTPVersion(req.Proto)
	if !ok {
		return nil, badRequest("malformed HTTP version")
	}
	hosts := req.Header.Values("Host")
	if len(hosts) > 1 {
		return nil, badRequest("more than one Host header")
	}
	if len(hosts) == 0 && (major > 1 || major == 1 && minor >= 1) {
		return nil, badRequest("missing Host header")
	}
	length, herr := contentLength(req.Header)
	if herr != nil {
		return nil, herr
	}
	return &http.Request{
		Method:           req.Method,
		URL:              u,
		Proto:            req.Proto,
		ProtoMajor:       major,
		ProtoMinor:       minor,
		Header:           req.Header,
		ContentLength:    length,
		TransferEncoding: req.Header.Values("Transfer-Encoding"),
		Host:             req.Header.Get("Host"),
		RequestURI:       req.RequestURI,
		RemoteAddr:       remoteAddr,
	}, nil
}

// contentLength is the length of the body as net/http reports it: 0
// without Content-Length, -1 (not known in advance) with a
// Transfer-Encoding.
func contentLength(h http.Header) (int64, *Error) {
	var length int64
	if cl := h.Values("Content-Length"); len(cl) > 0 {
		for _, v := range cl[1:] {
			if v != cl[0] {
				return 0, badRequest("conflicting Content-Length headers")
			}
		}
		n, err := strconv.ParseUint(cl[0], 10, 63) // digits only, no sign
		if err != nil {
			return 0, badRequest("invalid Content-Length header")
		}
		length = int64(n)
	}
	if len(h.Values("Transfer-Encoding")) > 0 {
		length = -1
	}
	return length, nil
}
