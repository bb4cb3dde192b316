package handshake

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// upgradeRequest is a good HTTP/1.1 opening handshake, as net/http hands it
// to a handler: browserRequest, from the same origin.
func upgradeRequest() *http.Request {
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(browserRequest)))
	if err != nil {
		panic(err)
	}
	r.Header.Set("Origin", "https://example.com:8080")
	return r
}

// h2Request is a good extended CONNECT, as net/http's HTTP/2 server hands
// it to a handler.
func h2Request() *http.Request {
	r := upgradeRequest()
	r.Method, r.Proto, r.ProtoMajor, r.ProtoMinor = http.MethodConnect, "HTTP/2.0", 2, 0
	r.ContentLength = -1
	for _, k := range []string{"Connection", "Upgrade", "Sec-Websocket-Key"} {
		delete(r.Header, k)
	}
	r.Header.Set(":protocol", "websocket")
	return r
}

func TestCheckRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		h2     bool
		change func(r *http.Request)
		status int
		reason string
	}{
		{name: "browser"},
		{name: "method", change: func(r *http.Request) { r.Method = http.MethodPost },
			status: 405, reason: "handshake method must be GET"},
		{name: "HTTP/1.0", change: func(r *http.Request) { r.ProtoMinor = 0 },
			status: 400, reason: "handshake needs HTTP/1.1"},
		{name: "no Connection", change: func(r *http.Request) { r.Header.Set("Connection", "keep-alive") },
			status: 400, reason: "Connection header must contain upgrade"},
		{name: "Connection list", change: func(r *http.Request) { r.Header.Set("Connection", "keep-alive, Upgrade") }},
		{name: "no Upgrade", change: func(r *http.Request) { r.Header.Del("Upgrade") },
			status: 400, reason: "Upgrade header must be websocket"},
		{name: "body", change: func(r *http.Request) { r.ContentLength = 5 },
			status: 400, reason: "handshake request must not have a body"},
		{name: "chunked", change: func(r *http.Request) { r.TransferEncoding = []string{"chunked"} },
			status: 400, reason: "handshake request must not have a body"},
		{name: "version 8", change: func(r *http.Request) { r.Header.Set("Sec-WebSocket-Version", "8") },
			status: 426, reason: "unsupported version; this server speaks 13"},
		{name: "two versions", change: func(r *http.Request) { r.Header.Add("Sec-WebSocket-Version", "13") },
			status: 426, reason: "unsupported version; this server speaks 13"},
		{name: "no key", change: func(r *http.Request) { r.Header.Del("Sec-WebSocket-Key") },
			status: 400, reason: "missing or invalid Sec-WebSocket-Key"},
		{name: "short key", change: func(r *http.Request) { r.Header.Set("Sec-WebSocket-Key", "c2hvcnQ=") },
			status: 400, reason: "missing or invalid Sec-WebSocket-Key"},
		{name: "two keys", change: func(r *http.Request) { r.Header.Add("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==") },
			status: 400, reason: "missing or invalid Sec-WebSocket-Key"},
		{name: "cross origin", change: func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") },
			status: 403, reason: "origin not allowed"},
		{name: "bad origin", change: func(r *http.Request) { r.Header.Set("Origin", "%zz") },
			status: 403, reason: "origin not allowed"},
		{name: "same origin, other case", change: func(r *http.Request) { r.Header.Set("Origin", "https://EXAMPLE.com:8080") }},
		{name: "no origin", change: func(r *http.Request) { r.Header.Del("Origin"); r.Host = "elsewhere" }},
		{name: "the version first", change: func(r *http.Request) {
			r.Header.Set("Sec-WebSocket-Version", "8")
			r.Header.Del("Sec-WebSocket-Key")
		}, status: 426, reason: "unsupported version; this server speaks 13"},

		{name: "h2", h2: true},
		{name: "h2 GET", h2: true, change: func(r *http.Request) { r.Method = http.MethodGet },
			status: 405, reason: "over HTTP/2 the handshake method must be CONNECT"},
		{name: "h2 no :protocol", h2: true, change: func(r *http.Request) { r.Header.Del(":protocol") },
			status: 400, reason: ":protocol must be websocket"},
		{name: "h2 :protocol case", h2: true, change: func(r *http.Request) { r.Header.Set(":protocol", "WebSocket") }},
		{name: "h2 version", h2: true, change: func(r *http.Request) { r.Header.Del("Sec-WebSocket-Version") },
			status: 426, reason: "unsupported version; this server speaks 13"},
		{name: "h2 cross origin", h2: true, change: func(r *http.Request) { r.Header.Set("Origin", "https://evil.example") },
			status: 403, reason: "origin not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := upgradeRequest()
			if tt.h2 {
				r = h2Request()
			}
			if tt.change != nil {
				tt.change(r)
			}
			key, err := CheckRequest(r, nil)
			if tt.status == 0 {
				require.Nil(t, err)
				if tt.h2 {
					require.Empty(t, key)
				} else {
					require.Equal(t, "dGhlIHNhbXBsZSBub25jZQ==", key)
				}
				return
			}
			require.NotNil(t, err)
			require.Empty(t, key)
			require.Equal(t, tt.status, err.Status)
			require.Equal(t, tt.reason, err.Reason)
		})
	}
}

// TestCheckRequestOrigin: checkOrigin replaces the same-origin rule, and
// sees only requests that passed the other checks.
func TestCheckRequestOrigin(t *testing.T) {
	t.Parallel()
	var asked int
	allow := func(ok bool) func(*http.Request) bool {
		return func(*http.Request) bool { asked++; return ok }
	}
	r := upgradeRequest()
	r.Header.Set("Origin", "https://evil.example")
	_, err := CheckRequest(r, allow(true))
	require.Nil(t, err)
	r.Header.Set("Origin", "https://example.com:8080")
	_, err = CheckRequest(r, allow(false))
	require.Equal(t, &Error{Status: 403, Reason: "origin not allowed"}, err)
	r.Method = http.MethodPost
	_, err = CheckRequest(r, allow(true))
	require.Equal(t, 405, err.Status)
	require.Equal(t, 2, asked)
}

func TestSubprotocols(t *testing.T) {
	t.Parallel()
	offer := http.Header{"Sec-Websocket-Protocol": {"chat, superchat", "v2"}}
	require.Equal(t, "v2", SelectSubprotocol([]string{"v3", "v2", "chat"}, offer), "the server's order")
	require.Equal(t, "", SelectSubprotocol([]string{"v3"}, offer))
	require.Equal(t, "", SelectSubprotocol(nil, offer))
	require.Equal(t, "", SelectSubprotocol([]string{"chat"}, http.Header{}))

	chosen, err := ChosenSubprotocol(offer, http.Header{"X": {"1"}})
	require.NoError(t, err)
	require.Equal(t, "", chosen)

	extra := http.Header{"Sec-Websocket-Protocol": {"superchat"}, "X": {"1"}}
	chosen, err = ChosenSubprotocol(offer, extra)
	require.NoError(t, err)
	require.Equal(t, "superchat", chosen)
	require.Equal(t, http.Header{"X": {"1"}}, extra, "the field is taken out")

	extra = http.Header{"sec-websocket-protocol": {"v2"}}
	chosen, err = ChosenSubprotocol(offer, extra)
	require.NoError(t, err)
	require.Equal(t, "v2", chosen, "a name in any case")
	require.Empty(t, extra)

	_, err = ChosenSubprotocol(offer, http.Header{"Sec-Websocket-Protocol": {"v9"}})
	require.EqualError(t, err, `OnRequest chose the subprotocol ["v9"]; the client offered ["chat" "superchat" "v2"]`)
	_, err = ChosenSubprotocol(offer, http.Header{"Sec-Websocket-Protocol": {"chat", "v2"}})
	require.EqualError(t, err, `OnRequest chose the subprotocol ["chat" "v2"]; the client offered ["chat" "superchat" "v2"]`)
	_, err = ChosenSubprotocol(http.Header{}, http.Header{"Sec-Websocket-Protocol": {""}})
	require.Error(t, err)
}

func TestCheckFields(t *testing.T) {
	t.Parallel()
	require.NoError(t, CheckFields(nil, ResponseOwn))
	require.NoError(t, CheckFields(http.Header{"Set-Cookie": {"a=1", "b=2"}, "X-Tab": {"a\tb"}}, ResponseOwn))
	require.EqualError(t, CheckFields(http.Header{"Bad Name": {"v"}}, ResponseOwn), `invalid field name "Bad Name"`)
	require.EqualError(t, CheckFields(http.Header{"X-Evil": {"v\r\nInjected: 1"}}, ResponseOwn),
		`invalid value "v\r\nInjected: 1" in field X-Evil`)
	// The handshake's own fields are skipped, whatever they hold.
	require.NoError(t, CheckFields(http.Header{"Content-Length": {"\n"}, "upgrade": {"\r"}}, ResponseOwn))
	require.Error(t, CheckFields(http.Header{"Upgrade": {"\r"}}, RefusalOwn))
	require.NoError(t, CheckFields(http.Header{"Connection": {"\r"}}, RefusalOwn))

	for _, name := range []string{"Upgrade", "connection", "SEC-WEBSOCKET-ACCEPT", "Sec-WebSocket-Protocol",
		"Sec-WebSocket-Extensions", "Content-Length", "Transfer-Encoding"} {
		require.True(t, ResponseOwn(name), name)
	}
	require.False(t, ResponseOwn("Sec-WebSocket-Version"))
	require.False(t, RefusalOwn("Upgrade"))
	require.True(t, RefusalOwn("transfer-encoding"))
}

func TestAppendResponse(t *testing.T) {
	t.Parallel()
	got := AppendResponse([]byte("x"), "dGhlIHNhbXBsZSBub25jZQ==", "chat", "permessage-deflate",
		http.Header{"Set-Cookie": {"a=1", "b=2"}, "Upgrade": {"no"}}, nil, http.Header{"X-Id": {"7"}})
	require.Equal(t, "xHTTP/1.1 101 Switching Protocols\r\n"+
		"Upgrade: websocket\r\n"+
		"Connection: Upgrade\r\n"+
		"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"+
		"Sec-WebSocket-Protocol: chat\r\n"+
		"Sec-WebSocket-Extensions: permessage-deflate\r\n"+
		"Set-Cookie: a=1\r\n"+
		"Set-Cookie: b=2\r\n"+
		"X-Id: 7\r\n"+
		"\r\n", string(got))

	got = AppendResponse(nil, "dGhlIHNhbXBsZSBub25jZQ==", "", "")
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
	require.NoError(t, err)
	require.Equal(t, 101, resp.StatusCode)
	require.Equal(t, http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"},
		"Sec-Websocket-Accept": {"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="}}, resp.Header)
}

func TestSetResponse(t *testing.T) {
	t.Parallel()
	h := http.Header{"Set-Cookie": {"a=1"}, "Content-Length": {"9"}, "Sec-Websocket-Protocol": {"old"}}
	SetResponse(h, "chat", "permessage-deflate",
		http.Header{"Set-Cookie": {"b=2"}, "Upgrade": {"no"}}, nil, http.Header{"X-Id": {"7"}, "Transfer-Encoding": {"x"}})
	require.Equal(t, http.Header{
		"Set-Cookie":               {"a=1", "b=2"},
		"Sec-Websocket-Protocol":   {"chat"},
		"Sec-Websocket-Extensions": {"permessage-deflate"},
		"X-Id":                     {"7"},
	}, h)
	h = http.Header{"Sec-Websocket-Extensions": {"old"}}
	SetResponse(h, "", "")
	require.Empty(t, h)
}

func TestSetRefusal(t *testing.T) {
	t.Parallel()
	h := http.Header{"Set-Cookie": {"a=1"}, "X-Kept": {"1"}, "Transfer-Encoding": {"chunked"}, "Connection": {"keep-alive"}}
	SetRefusal(h, http.Header{"Set-Cookie": {"b=2"}, "Retry-After": {"5"}, "Content-Length": {"99"}, "Connection": {"close"}}, 12)
	require.Equal(t, http.Header{
		"Set-Cookie":     {"b=2"},
		"X-Kept":         {"1"},
		"Retry-After":    {"5"},
		"Content-Length": {"12"},
		"Connection":     {"keep-alive"}, // net/http's to set
	}, h)
	h = http.Header{}
	SetRefusal(h, nil, 0)
	require.Equal(t, http.Header{"Content-Length": {"0"}}, h)
}

func TestAppendError(t *testing.T) {
	t.Parallel()
	require.Equal(t, "HTTP/1.1 400 Bad Request\r\n"+
		"Content-Type: text/plain; charset=utf-8\r\n"+
		"Connection: close\r\n"+
		"Content-Length: 12\r\n"+
		"\r\n"+
		"bad request\n", string(AppendError(nil, 400, "bad request")))
	require.Contains(t, string(AppendError(nil, 426, "v")), "\r\nSec-WebSocket-Version: 13\r\n")
	require.Contains(t, string(AppendError(nil, 405, "m")), "\r\nAllow: GET\r\n")

	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(AppendError(nil, 431, "request head too large"))), nil)
	require.NoError(t, err)
	require.Equal(t, 431, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "request head too large\n", string(body))
}

func TestAppendRefusal(t *testing.T) {
	t.Parallel()
	head := AppendRefusal(nil, 401, http.Header{"Www-Authenticate": {"Basic"}, "Connection": {"keep-alive"}}, []byte("<html>who?</html>"))
	require.Equal(t, "HTTP/1.1 401 Unauthorized\r\n"+
		"Connection: close\r\n"+
		"Content-Type: text/html; charset=utf-8\r\n"+
		"Www-Authenticate: Basic\r\n"+
		"Content-Length: 17\r\n"+
		"\r\n", string(head))
	head = AppendRefusal(nil, 403, http.Header{"Content-Type": {"application/json"}}, []byte("{}"))
	require.Equal(t, "HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n", string(head))
	head = AppendRefusal(nil, 503, nil, nil)
	require.Equal(t, "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", string(head))
}

func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	req, _, err := Parse([]byte(browserRequest), 0)
	require.NoError(t, err)
	r, herr := req.HTTPRequest("192.0.2.1:5000")
	require.Nil(t, herr)
	want, err := http.ReadRequest(bufio.NewReader(strings.NewReader(browserRequest)))
	require.NoError(t, err)
	want.Header["Host"] = []string{"example.com:8080"} // kept in the header, unlike net/http
	require.Equal(t, want.Method, r.Method)
	require.Equal(t, want.URL, r.URL)
	require.Equal(t, want.Proto, r.Proto)
	require.Equal(t, want.ProtoMajor, r.ProtoMajor)
	require.Equal(t, want.ProtoMinor, r.ProtoMinor)
	require.Equal(t, want.Header, r.Header)
	require.Equal(t, want.Host, r.Host)
	require.Equal(t, want.RequestURI, r.RequestURI)
	require.Equal(t, int64(0), r.ContentLength)
	require.Nil(t, r.TransferEncoding)
	require.Equal(t, "192.0.2.1:5000", r.RemoteAddr)
	key, cerr := CheckRequest(r, func(*http.Request) bool { return true })
	require.Nil(t, cerr)
	require.Equal(t, "dGhlIHNhbXBsZSBub25jZQ==", key)

	tests := []struct {
		head   string
		length int64
		reason string
	}{
		{"GET / HTTP/1.0\r\n\r\n", 0, ""},
		{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 5, ""},
		{"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", -1, ""},
		{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 0, "conflicting Content-Length headers"},
		{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 0, "invalid Content-Length header"},
		{"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", 0, "invalid Content-Length header"},
		{"GET / HTTP/1.1\r\n\r\n", 0, "missing Host header"},
		{"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 0, "more than one Host header"},
		{"GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n", 0, "invalid request target"},
	}
	for _, tt := range tests {
		t.Run(tt.head, func(t *testing.T) {
			req, _, err := Parse([]byte(tt.head), 0)
			require.NoError(t, err)
			r, herr := req.HTTPRequest("")
			if tt.reason != "" {
				require.Nil(t, r)
				require.Equal(t, &Error{Status: 400, Reason: tt.reason}, herr)
				return
			}
			require.Nil(t, herr)
			require.Equal(t, tt.length, r.ContentLength)
		})
	}
}

// FuzzRequest runs a head through Parse, HTTPRequest and CheckRequest, as
// gust's Server does: whatever the bytes, the answer is a request with a
// valid key, or a refusal with a status the handshake uses and a reason
// that AppendError writes as a response net/http reads back.
func FuzzRequest(f *testing.F) {
	f.Add([]byte(browserRequest))
	f.Add([]byte(strings.Replace(browserRequest, "GET", "POST", 1)))
	f.Add([]byte(strings.Replace(browserRequest, "Version: 13", "Version: 8", 1)))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, buf []byte) {
		req, _, err := Parse(buf, 0)
		if err != nil {
			return
		}
		r, herr := req.HTTPRequest("192.0.2.1:1")
		var key string
		if herr == nil {
			r.TLS = &tls.ConnectionState{}
			key, herr = CheckRequest(r, nil)
		}
		if herr == nil {
			if !ValidKey(key) {
				t.Fatalf("accepted with key %q", key)
			}
			return
		}
		switch herr.Status {
		case 400, 403, 405, 426:
		default:
			t.Fatalf("status %d (%s)", herr.Status, herr.Reason)
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(AppendError(nil, herr.Status, herr.Reason))), nil)
		if err != nil || resp.StatusCode != herr.Status {
			t.Fatalf("AppendError of %d %q: %v", herr.Status, herr.Reason, err)
		}
	})
}
