package handshake

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// The client's side of the opening handshake (RFC 6455 §4.1): its URL, its
// request and the checks of the server's answer.

// ParseURL checks a ws:// or wss:// URL (RFC 6455 §3).
func ParseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	u.Scheme = strings.ToLower(u.Scheme)
	switch {
	case u.Scheme != "ws" && u.Scheme != "wss":
		return nil, fmt.Errorf("URL scheme must be ws or wss, not %q", u.Scheme)
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("URL %q has no host", u.Redacted())
	case strings.Contains(rawURL, "#"):
		return nil, fmt.Errorf("URL %q has a fragment, which RFC 6455 forbids", u.Redacted())
	}
	return u, nil
}

// HostPort is the address to connect to for u, with the scheme's default
// port.
func HostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "wss" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// NewKey returns a Sec-WebSocket-Key: 16 random bytes in base64.
func NewKey() string {
	var k [16]byte
	rand.Read(k[:]) // never fails (crypto/rand)
	return base64.StdEncoding.EncodeToString(k[:])
}

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

// ClientRequest is the handshake request over HTTP/1.1 for u, with the
// fields that ClientFields returned, the challenge key, and Basic
// credentials from u's userinfo unless fields has an Authorization. host,
// if not "", is the Host instead of u's.
func ClientRequest(u *url.URL, host string, fields http.Header, key string) *http.Request {
	if host == "" {
		host = u.Host
	}
	fields.Set("Upgrade", "websocket")
	fields.Set("Connection", "Upgrade")
	fields.Set("Sec-WebSocket-Key", key)
	if u.User != nil && fields.Get("Authorization") == "" {
		pass, _ := u.User.Password()
		fields.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass)))
	}
	return &http.Request{Method: http.MethodGet, URL: u, Host: host, Header: fields,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
}

// WriteRequest writes the head of req, which ClientRequest made: the
// request line, Host, the WebSocket fields, then the others in sorted
// order (newlines in values become spaces).
func WriteRequest(b *bytes.Buffer, req *http.Request) {
	b.WriteString("GET ")
	b.WriteString(req.URL.RequestURI())
	b.WriteString(" HTTP/1.1\r\nHost: ")
	b.WriteString(req.Host)
	b.WriteString("\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ")
	b.WriteString(req.Header.Get("Sec-WebSocket-Key"))
	b.WriteString("\r\nSec-WebSocket-Version: 13\r\n")
	if p := req.Header.Get("Sec-WebSocket-Protocol"); p != "" {
		b.WriteString("Sec-WebSocket-Protocol: " + p + "\r\n")
	}
	if e := req.Header.Get("Sec-WebSocket-Extensions"); e != "" {
		b.WriteString("Sec-WebSocket-Extensions: " + e + "\r\n")
	}
	req.Header.WriteSubset(b, writtenFields)
	b.WriteString("\r\n")
}

var writtenFields = map[string]bool{
	"Upgrade": true, "Connection": true, "Sec-Websocket-Key": true, "Sec-Websocket-Version": true,
	"Sec-Websocket-Protocol": true, "Sec-Websocket-Extensions": true,
}

// ClientOwn reports whether the handshake request writes the field name
// itself, so that the application may not set it.
func ClientOwn(name string) bool { return writtenFields[http.CanonicalHeaderKey(name)] }

// CheckResponse checks the Upgrade, Connection and Sec-WebSocket-Accept
// fields of a 101 answer to the handshake of key (RFC 6455 §4.1).
func CheckResponse(h http.Header, key string) error {
	if !HasToken(h, "Upgrade", "websocket") {
		//lint:ignore ST1005 the message begins with the field's name
		return fmt.Errorf("Upgrade header is %q, not websocket", h.Get("Upgrade"))
	}
	if !HasToken(h, "Connection", "upgrade") {
		//lint:ignore ST1005 the message begins with the field's name
		return fmt.Errorf("Connection header %q does not contain upgrade", h.Get("Connection"))
	}
	if accept := h.Values("Sec-WebSocket-Accept"); len(accept) != 1 || accept[0] != AcceptKey(key) {
		return fmt.Errorf("Sec-WebSocket-Accept %q does not answer the key", accept)
	}
	return nil
}

// CheckSubprotocol returns the subprotocol an accepting answer selected,
// over HTTP/1.1 or HTTP/2: "" for none, else one of offered.
func CheckSubprotocol(h http.Header, offered []string) (string, error) {
	switch protos := Tokens(h, "Sec-WebSocket-Protocol"); {
	case len(protos) > 1:
		return "", fmt.Errorf("the server selected several subprotocols: %q", protos)
	case len(protos) == 1 && !slices.Contains(offered, protos[0]):
		return "", fmt.Errorf("the server selected subprotocol %q, which was not offered", protos[0])
	case len(protos) == 1:
		return protos[0], nil
	}
	return "", nil
}

// ClientHeader checks the fields an application adds to the handshake
// request and returns them under their canonical names, but for Host,
// whose value it returns apart ("" for none).
func ClientHeader(header http.Header) (fields http.Header, host string, err error) {
	fields = make(http.Header, len(header))
	for name, values := range header {
		if !ValidFieldName(name) {
			return nil, "", fmt.Errorf("invalid request header name %q", name)
		}
		key := http.CanonicalHeaderKey(name)
		if ClientOwn(key) {
			return nil, "", fmt.Errorf("request header %s is set by the handshake itself; use DialOptions.Subprotocols and Options.Compression", key)
		}
		if key == "Host" {
			if len(values) != 1 || values[0] == "" || strings.ContainsAny(values[0], "\r\n\x00 ") {
				return nil, "", fmt.Errorf("invalid Host header %q", values)
			}
			host = values[0]
			continue
		}
		fields[key] = append(fields[key], values...)
	}
	return fields, host, nil
}

// SubprotocolOffer returns the Sec-WebSocket-Protocol of a request that
// offers subprotocols, "" for none; each must be a token (RFC 6455 §4.1).
func SubprotocolOffer(subprotocols []string) (string, error) {
	for _, p := range subprotocols {
		if !IsToken(p) {
			return "", fmt.Errorf("invalid subprotocol %q: it must be an HTTP token", p)
		}
	}
	return strings.Join(subprotocols, ", "), nil
}

// ReadResponse reads the answer to req, the handshake request sent on r,
// its head bounded by maxHead bytes. rest holds, of a 101, the bytes read
// past the head, which the connection's first reads must return; of a
// refusal, up to maxBody bytes of its body, which resp.Body returns too.
func ReadResponse(r io.Reader, req *http.Request, maxHead, maxBody int) (resp *http.Response, rest []byte, err error) {
	// Read the head through a limit, so that a server cannot feed an
	// endless header; the bytes bufio reads past the head are kept.
	lr := &io.LimitedReader{R: r, N: int64(maxHead)}
	br := bufio.NewReaderSize(lr, 4096)
	resp, err = http.ReadResponse(br, req)
	if err != nil {
		if lr.N == 0 {
			err = fmt.Errorf("response head over %d bytes", maxHead)
		}
		return nil, nil, fmt.Errorf("reading the handshake response: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		lr.N = int64(maxBody) // the body's own bound, not what the head left
		body, _ := io.ReadAll(io.LimitReader(resp.Body, int64(maxBody)))
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp, body, nil
	}
	if n := br.Buffered(); n > 0 {
		rest, _ = br.Peek(n)
	}
	return resp, rest, nil
}
