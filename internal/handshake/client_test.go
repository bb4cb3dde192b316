package handshake

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewKey(t *testing.T) {
	t.Parallel()
	a, b := NewKey(), NewKey()
	require.True(t, ValidKey(a), a)
	require.NotEqual(t, a, b)
}

func TestClientFields(t *testing.T) {
	t.Parallel()
	header := http.Header{"Origin": {"https://a.example"}}
	h := ClientFields(header, "chat, v2", "permessage-deflate")
	require.Equal(t, http.Header{
		"Origin":                   {"https://a.example"},
		"Sec-Websocket-Version":    {"13"},
		"Sec-Websocket-Protocol":   {"chat, v2"},
		"Sec-Websocket-Extensions": {"permessage-deflate"},
	}, h)
	h["Origin"][0] = "changed"
	require.Equal(t, "https://a.example", header.Get("Origin"), "a copy")
	require.Equal(t, http.Header{"Sec-Websocket-Version": {"13"}}, ClientFields(nil, "", ""))
}

func TestClientRequest(t *testing.T) {
	t.Parallel()
	u, err := url.Parse("ws://user:pa%20ss@example.com:8080/chat?room=1")
	require.NoError(t, err)
	fields := ClientFields(http.Header{"Origin": {"http://example.com"}, "X-Multi": {"a\r\nb"}}, "chat", "permessage-deflate")
	req := ClientRequest(u, "", fields, "dGhlIHNhbXBsZSBub25jZQ==")
	require.Equal(t, "example.com:8080", req.Host)
	require.Equal(t, "Basic dXNlcjpwYSBzcw==", req.Header.Get("Authorization"))
	var b bytes.Buffer
	WriteRequest(&b, req)
	require.Equal(t, "GET /chat?room=1 HTTP/1.1\r\n"+
		"Host: example.com:8080\r\n"+
		"Upgrade: websocket\r\n"+
		"Connection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"+
		"Sec-WebSocket-Version: 13\r\n"+
		"Sec-WebSocket-Protocol: chat\r\n"+
		"Sec-WebSocket-Extensions: permessage-deflate\r\n"+
		"Authorization: Basic dXNlcjpwYSBzcw==\r\n"+
		"Origin: http://example.com\r\n"+
		"X-Multi: a  b\r\n"+
		"\r\n", b.String())

	// Host replaced; an Authorization of the caller's wins over userinfo;
	// no subprotocol or extension lines when none are offered.
	req = ClientRequest(u, "other.example", ClientFields(http.Header{"Authorization": {"Bearer t"}}, "", ""), "AAAAAAAAAAAAAAAAAAAAAA==")
	b.Reset()
	WriteRequest(&b, req)
	require.Equal(t, "GET /chat?room=1 HTTP/1.1\r\n"+
		"Host: other.example\r\n"+
		"Upgrade: websocket\r\n"+
		"Connection: Upgrade\r\n"+
		"Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n"+
		"Sec-WebSocket-Version: 13\r\n"+
		"Authorization: Bearer t\r\n"+
		"\r\n", b.String())
}

func TestCheckResponse(t *testing.T) {
	t.Parallel()
	const key = "dGhlIHNhbXBsZSBub25jZQ=="
	good := func() http.Header {
		return http.Header{"Upgrade": {"WebSocket"}, "Connection": {"keep-alive, upgrade"},
			"Sec-Websocket-Accept": {"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="}}
	}
	require.NoError(t, CheckResponse(good(), key))
	tests := []struct {
		change func(http.Header)
		err    string
	}{
		{func(h http.Header) { h.Set("Upgrade", "h2c") }, `Upgrade header is "h2c", not websocket`},
		{func(h http.Header) { h.Del("Connection") }, `Connection header "" does not contain upgrade`},
		{func(h http.Header) { h.Set("Sec-WebSocket-Accept", "x") }, `Sec-WebSocket-Accept ["x"] does not answer the key`},
		{func(h http.Header) { h.Add("Sec-WebSocket-Accept", "x") },
			`Sec-WebSocket-Accept ["s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" "x"] does not answer the key`},
		{func(h http.Header) { h.Del("Sec-WebSocket-Accept") }, `Sec-WebSocket-Accept [] does not answer the key`},
	}
	for _, tt := range tests {
		h := good()
		tt.change(h)
		require.EqualError(t, CheckResponse(h, key), tt.err)
	}
}

func TestCheckSubprotocol(t *testing.T) {
	t.Parallel()
	offered := []string{"chat", "v2"}
	p, err := CheckSubprotocol(http.Header{}, offered)
	require.NoError(t, err)
	require.Equal(t, "", p)
	p, err = CheckSubprotocol(http.Header{"Sec-Websocket-Protocol": {" v2 "}}, offered)
	require.NoError(t, err)
	require.Equal(t, "v2", p)
	_, err = CheckSubprotocol(http.Header{"Sec-Websocket-Protocol": {"v3"}}, offered)
	require.EqualError(t, err, `the server selected subprotocol "v3", which was not offered`)
	_, err = CheckSubprotocol(http.Header{"Sec-Websocket-Protocol": {"v3"}}, nil)
	require.EqualError(t, err, `the server selected subprotocol "v3", which was not offered`)
	_, err = CheckSubprotocol(http.Header{"Sec-Websocket-Protocol": {"chat, v2"}}, offered)
	require.EqualError(t, err, `the server selected several subprotocols: ["chat" "v2"]`)
}

func TestIsToken(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"chat", "v1.2", "a!#$%&'*+-.^_`|~Z9"} {
		require.True(t, IsToken(s), s)
	}
	for _, s := range []string{"", "a b", "a,b", "a/b", "é", "a\x00"} {
		require.False(t, IsToken(s), s)
	}
}

// TestHandshakeRoundTrip runs a whole opening handshake through the pure
// functions: the client's request is parsed, checked and answered by the
// server's, and the client accepts the answer.
func TestHandshakeRoundTrip(t *testing.T) {
	t.Parallel()
	u, err := url.Parse("ws://example.com/ws")
	require.NoError(t, err)
	key := NewKey()
	var b bytes.Buffer
	WriteRequest(&b, ClientRequest(u, "", ClientFields(nil, "chat, v2", ""), key))

	req, n, err := Parse(b.Bytes(), 4096)
	require.NoError(t, err)
	require.Equal(t, b.Len(), n)
	r, herr := req.HTTPRequest("192.0.2.1:1")
	require.Nil(t, herr)
	gotKey, herr := CheckRequest(r, nil)
	require.Nil(t, herr)
	require.Equal(t, key, gotKey)
	sub := SelectSubprotocol([]string{"v2"}, r.Header)

	answer := AppendResponse(nil, gotKey, sub, "")
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(answer)), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	require.NoError(t, CheckResponse(resp.Header, key))
	p, err := CheckSubprotocol(resp.Header, []string{"chat", "v2"})
	require.NoError(t, err)
	require.Equal(t, "v2", p)
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	u, err := ParseURL("WSS://user:pw@example.com:8443/chat?room=1")
	require.NoError(t, err)
	require.Equal(t, "wss", u.Scheme, "the scheme is lowered")
	require.Equal(t, "example.com:8443", u.Host)
	require.Equal(t, "/chat?room=1", u.RequestURI())

	for _, tc := range []struct{ url, want string }{
		{"http://example.com/", `URL scheme must be ws or wss, not "http"`},
		{"ws:///path", `URL "ws:///path" has no host`},
		{"ws://:80/", `URL "ws://:80/" has no host`},
		{"ws:example.com", `URL "ws:example.com" has no host`},
		{"ws://u:secret@example.com/#frag", `URL "ws://u:xxxxx@example.com/#frag" has a fragment, which RFC 6455 forbids`},
		{"ws://example.com/#", `URL "ws://example.com/" has a fragment, which RFC 6455 forbids`},
	} {
		_, err := ParseURL(tc.url)
		require.EqualError(t, err, tc.want, tc.url)
	}
	_, err = ParseURL("ws://example.com/%zz")
	var ue *url.Error
	require.ErrorAs(t, err, &ue, "url.Parse's error, as it is")
}

func TestHostPort(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"ws://example.com/":       "example.com:80",
		"wss://example.com/":      "example.com:443",
		"ws://example.com:8080/":  "example.com:8080",
		"wss://[::1]/":            "[::1]:443",
		"ws://[fe80::1%25eth0]:9": "[fe80::1%eth0]:9",
	} {
		u, err := ParseURL(raw)
		require.NoError(t, err)
		require.Equal(t, want, HostPort(u), raw)
	}
}

func TestClientOwn(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Upgrade", "connection", "Sec-WebSocket-Key", "SEC-WEBSOCKET-VERSION",
		"Sec-WebSocket-Protocol", "sec-websocket-extensions"} {
		require.True(t, ClientOwn(name), name)
	}
	for _, name := range []string{"Host", "Authorization", "Origin", "Sec-WebSocket-Accept", "Cookie"} {
		require.False(t, ClientOwn(name), name)
	}
}

func TestClientHeader(t *testing.T) {
	t.Parallel()
	fields, host, err := ClientHeader(http.Header{"origin": {"https://a.example"}, "X-Multi": {"a", "b"},
		"host": {"other.example:8080"}})
	require.NoError(t, err)
	require.Equal(t, http.Header{"Origin": {"https://a.example"}, "X-Multi": {"a", "b"}}, fields, "canonical names, without Host")
	require.Equal(t, "other.example:8080", host)

	fields, host, err = ClientHeader(nil)
	require.NoError(t, err)
	require.NotNil(t, fields)
	require.Empty(t, fields)
	require.Empty(t, host)

	for _, tc := range []struct {
		header http.Header
		want   string
	}{
		{http.Header{"Bad Name": {"x"}}, `invalid request header name "Bad Name"`},
		{http.Header{"sec-websocket-protocol": {"x"}}, "request header Sec-Websocket-Protocol is set by the handshake itself; use DialOptions.Subprotocols and Options.Compression"},
		{http.Header{"Connection": {"close"}}, "request header Connection is set by the handshake itself; use DialOptions.Subprotocols and Options.Compression"},
		{http.Header{"Host": {"a", "b"}}, `invalid Host header ["a" "b"]`},
		{http.Header{"Host": {""}}, `invalid Host header [""]`},
		{http.Header{"Host": {"a b"}}, `invalid Host header ["a b"]`},
		{http.Header{"Host": {"a\r\nX: y"}}, `invalid Host header ["a\r\nX: y"]`},
	} {
		_, _, err := ClientHeader(tc.header)
		require.EqualError(t, err, tc.want)
	}
}

func TestSubprotocolOffer(t *testing.T) {
	t.Parallel()
	offer, err := SubprotocolOffer([]string{"chat", "v2.json"})
	require.NoError(t, err)
	require.Equal(t, "chat, v2.json", offer)
	offer, err = SubprotocolOffer(nil)
	require.NoError(t, err)
	require.Empty(t, offer)
	_, err = SubprotocolOffer([]string{"chat", "a b"})
	require.EqualError(t, err, `invalid subprotocol "a b": it must be an HTTP token`)
}

func TestReadResponse(t *testing.T) {
	t.Parallel()
	req := &http.Request{Method: http.MethodGet}
	head := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"

	// A 101: rest is what followed the head, the connection's first bytes.
	resp, rest, err := ReadResponse(strings.NewReader(head+"\x81\x02hi"), req, 4096, 16)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	require.Equal(t, "websocket", resp.Header.Get("Upgrade"))
	require.Equal(t, []byte("\x81\x02hi"), rest)
	_, rest, err = ReadResponse(strings.NewReader(head), req, 4096, 16)
	require.NoError(t, err)
	require.Nil(t, rest, "nothing followed")

	// The head's limit: a head at the limit is read, one over it is not.
	_, _, err = ReadResponse(strings.NewReader(head), req, len(head), 16)
	require.NoError(t, err)
	_, _, err = ReadResponse(strings.NewReader(head), req, len(head)-1, 16)
	require.EqualError(t, err, fmt.Sprintf("reading the handshake response: response head over %d bytes", len(head)-1))
	big := "HTTP/1.1 101 Switching Protocols\r\nX-Big: " + strings.Repeat("b", 8000) + "\r\n\r\n"
	_, _, err = ReadResponse(strings.NewReader(big), req, 4096, 16)
	require.EqualError(t, err, "reading the handshake response: response head over 4096 bytes")

	// Below the limit, http.ReadResponse's error.
	_, _, err = ReadResponse(strings.NewReader("HTTP/1.1 101 Switching"), req, 4096, 16)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.ErrorContains(t, err, "reading the handshake response: ")

	// A refusal: its body, up to maxBody bytes, in rest and resp.Body,
	// though the head left less than that of maxHead.
	refusal := "HTTP/1.1 403 Forbidden\r\nContent-Length: 40\r\n\r\n" + strings.Repeat("x", 40)
	resp, rest, err = ReadResponse(strings.NewReader(refusal), req, len(refusal)-38, 16)
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, strings.Repeat("x", 16), string(rest))
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, rest, body)
	require.NoError(t, resp.Body.Close())
}
