package handshake

import (
	"errors"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// browserRequest is what Chrome sends to open a WebSocket, give or take.
const browserRequest = "GET /chat?room=42 HTTP/1.1\r\n" +
	"Host: example.com:8080\r\n" +
	"Connection: Upgrade\r\n" +
	"Pragma: no-cache\r\n" +
	"Cache-Control: no-cache\r\n" +
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36\r\n" +
	"Upgrade: websocket\r\n" +
	"Origin: https://example.com\r\n" +
	"Sec-WebSocket-Version: 13\r\n" +
	"Accept-Encoding: gzip, deflate, br, zstd\r\n" +
	"Accept-Language: en-US,en;q=0.9\r\n" +
	"Cookie: session=8f2a1c9e0b7d4f3a; theme=dark\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
	"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n" +
	"\r\n"

func TestParseBrowserRequest(t *testing.T) {
	t.Parallel()
	frame := "\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58"
	buf := []byte(browserRequest + frame)
	req, n, err := Parse(buf, 4096)
	require.NoError(t, err)
	require.Equal(t, len(browserRequest), n)
	require.Equal(t, frame, string(buf[n:]))
	require.Equal(t, "GET", req.Method)
	require.Equal(t, "/chat?room=42", req.RequestURI)
	require.Equal(t, "HTTP/1.1", req.Proto)
	require.Equal(t, "example.com:8080", req.Header.Get("Host"))
	require.Equal(t, []string{"dGhlIHNhbXBsZSBub25jZQ=="}, req.Header["Sec-Websocket-Key"])
	require.Equal(t, []string{"13"}, req.Header["Sec-Websocket-Version"])
	require.Equal(t, []string{"permessage-deflate; client_max_window_bits"}, req.Header["Sec-Websocket-Extensions"])
	require.Len(t, req.Header, 13)
	require.True(t, HasToken(req.Header, "connection", "upgrade"))
	require.True(t, HasToken(req.Header, "Upgrade", "WebSocket"))
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		in         string
		max        int
		wantStatus int // 0: success
		method     string
		target     string
		proto      string
		header     http.Header
	}{
		{
			name:   "minimal",
			in:     "GET / HTTP/1.1\r\n\r\n",
			method: "GET", target: "/", proto: "HTTP/1.1", header: http.Header{},
		},
		{
			name:   "http 1.0",
			in:     "GET /x HTTP/1.0\r\nHost: a\r\n\r\n",
			method: "GET", target: "/x", proto: "HTTP/1.0", header: http.Header{"Host": {"a"}},
		},
		{
			name:   "absolute form and odd method",
			in:     "M-SEARCH http://h/p?q=1#f HTTP/1.1\r\n\r\n",
			method: "M-SEARCH", target: "http://h/p?q=1#f", proto: "HTTP/1.1", header: http.Header{},
		},
		{
			name:   "canonical keys, trimmed values, repeats in order",
			in:     "GET / HTTP/1.1\r\nsec-websocket-protocol: \t chat, superchat \t\r\nX-A:1\r\nx-a: 2\r\nSEC-WEBSOCKET-PROTOCOL:v3\r\nX-Empty:\r\nX-Blank:   \r\n\r\n",
			method: "GET", target: "/", proto: "HTTP/1.1",
			header: http.Header{
				"Sec-Websocket-Protocol": {"chat, superchat", "v3"},
				"X-A":                    {"1", "2"},
				"X-Empty":                {""},
				"X-Blank":                {""},
			},
		},
		{
			name:   "value with inner spaces, colons and obs-text",
			in:     "GET / HTTP/1.1\r\nX-Y: a : b\t c \xc3\xa9\r\n\r\n",
			method: "GET", target: "/", proto: "HTTP/1.1", header: http.Header{"X-Y": {"a : b\t c \xc3\xa9"}},
		},
		{
			name:   "token characters in name",
			in:     "GET / HTTP/1.1\r\n!#$%&'*+-.^_`|~09az: v\r\n\r\n",
			method: "GET", target: "/", proto: "HTTP/1.1", header: http.Header{"!#$%&'*+-.^_`|~09az": {"v"}},
		},
		{
			name:   "head exactly at the limit",
			in:     "GET / HTTP/1.1\r\n\r\n",
			max:    18,
			method: "GET", target: "/", proto: "HTTP/1.1", header: http.Header{},
		},

		{name: "head over the limit", in: "GET / HTTP/1.1\r\n\r\n", max: 17, wantStatus: 431},
		{name: "incomplete over the limit", in: "GET / HTTP/1.1\r\nHost: aaaaaaaaaaaa", max: 20, wantStatus: 431},
		{name: "long line over the limit", in: "GET /" + strings.Repeat("a", 100), max: 50, wantStatus: 431},
		{name: "http 2", in: "GET / HTTP/2.0\r\n\r\n", wantStatus: 505},
		{name: "http 0.9 style version", in: "GET / HTTP/0.9\r\n\r\n", wantStatus: 505},
		{name: "version lower case", in: "GET / http/1.1\r\n\r\n", wantStatus: 400},
		{name: "version two digits", in: "GET / HTTP/11.0\r\n\r\n", wantStatus: 400},
		{name: "version missing", in: "GET /\r\n\r\n", wantStatus: 400},
		{name: "no target", in: "GET HTTP/1.1\r\n\r\n", wantStatus: 400},
		{name: "double space", in: "GET  / HTTP/1.1\r\n\r\n", wantStatus: 400},
		{name: "double space before version", in: "GET /  HTTP/1.1\r\n\r\n", wantStatus: 400},
		{name: "four parts", in: "GET / x HTTP/1.1\r\n\r\n", wantStatus: 400},
		{name: "trailing space", in: "GET / HTTP/1.1 \r\n\r\n", wantStatus: 400},
		{name: "leading space", in: " GET / HTTP/1.1\r\n\r\n", wantStatus: 400},
		{name: "tab separator", in: "GET\t/ HTTP/1.1\r\n\r\n", wantStatus: 400},
		{name: "method not a token", in: "G(T / HTTP/1.1\r\n\r\n", wantStatus: 400},
		{name: "control in target", in: "GET /a\x01b HTTP/1.1\r\n\r\n", wantStatus: 400},
		{name: "non-ascii target", in: "GET /\xc3\xa9 HTTP/1.1\r\n\r\n", wantStatus: 400},
		{name: "empty request line", in: "\r\nGET / HTTP/1.1\r\n\r\n", wantStatus: 400},
		{name: "bare LF ends request line", in: "GET / HTTP/1.1\n\r\n", wantStatus: 400},
		{name: "bare LF ends header", in: "GET / HTTP/1.1\r\nHost: a\n\r\n", wantStatus: 400},
		{name: "bare LF ends head", in: "GET / HTTP/1.1\r\n\n", wantStatus: 400},
		{name: "bare CR in value", in: "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", wantStatus: 400},
		{name: "NUL in value", in: "GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n", wantStatus: 400},
		{name: "DEL in value", in: "GET / HTTP/1.1\r\nX: a\x7fb\r\n\r\n", wantStatus: 400},
		{name: "obs-fold", in: "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", wantStatus: 400},
		{name: "obs-fold tab", in: "GET / HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n", wantStatus: 400},
		{name: "space before colon", in: "GET / HTTP/1.1\r\nHost : a\r\n\r\n", wantStatus: 400},
		{name: "tab before colon", in: "GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", wantStatus: 400},
		{name: "no colon", in: "GET / HTTP/1.1\r\nHost a\r\n\r\n", wantStatus: 400},
		{name: "empty name", in: "GET / HTTP/1.1\r\n: a\r\n\r\n", wantStatus: 400},
		{name: "name not a token", in: "GET / HTTP/1.1\r\nX(Y): a\r\n\r\n", wantStatus: 400},
		{name: "non-ascii name", in: "GET / HTTP/1.1\r\nX\xc3\xa9: a\r\n\r\n", wantStatus: 400},
		{name: "malformed line before end of head", in: "GET / HTTP/1.1\r\nbad line\r\nHost: a", wantStatus: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, n, err := Parse([]byte(tt.in), tt.max)
			if tt.wantStatus != 0 {
				require.Nil(t, req)
				require.Zero(t, n)
				var e *Error
				require.ErrorAs(t, err, &e)
				require.Equal(t, tt.wantStatus, e.Status, "reason: %s", e.Reason)
				require.NotEmpty(t, e.Reason)
				require.Contains(t, e.Error(), http.StatusText(tt.wantStatus))
				return
			}
			require.NoError(t, err)
			require.Equal(t, len(tt.in), n)
			require.Equal(t, tt.method, req.Method)
			require.Equal(t, tt.target, req.RequestURI)
			require.Equal(t, tt.proto, req.Proto)
			require.Equal(t, tt.header, req.Header)
		})
	}
}

func TestParseIncomplete(t *testing.T) {
	t.Parallel()
	// Every proper prefix of a valid head is incomplete, with or without a
	// limit that the whole head fits in.
	for i := range len(browserRequest) {
		for _, max := range []int{0, len(browserRequest)} {
			req, n, err := Parse([]byte(browserRequest[:i]), max)
			require.ErrorIs(t, err, ErrIncomplete, "prefix %d max %d", i, max)
			require.Nil(t, req)
			require.Zero(t, n)
		}
	}
	// Once a limit is passed, incomplete turns into 431.
	_, _, err := Parse([]byte(browserRequest[:101]), 100)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, e.Status)
	require.False(t, errors.Is(err, ErrIncomplete))
}

func TestParseRepeatedHeaderDoesNotClobber(t *testing.T) {
	t.Parallel()
	req, _, err := Parse([]byte("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nA: 3\r\nC: 4\r\nA: 5\r\n\r\n"), 0)
	require.NoError(t, err)
	require.Equal(t, http.Header{"A": {"1", "3", "5"}, "B": {"2"}, "C": {"4"}}, req.Header)
	req.Header.Add("B", "x") // appending to one key must not touch another
	require.Equal(t, []string{"4"}, req.Header["C"])
}

func TestCanonicalKey(t *testing.T) {
	t.Parallel()
	tests := []string{
		"host", "HOST", "Host", "sec-websocket-key", "Sec-WebSocket-Key", "SEC-WEBSOCKET-VERSION",
		"x-", "-x", "a--b", "foo_bar", "x1y", "content-md5", "A.B-c",
		strings.Repeat("ab-", 30), strings.Repeat("A", 64), strings.Repeat("a", 65),
	}
	for _, name := range tests {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, textproto.CanonicalMIMEHeaderKey(name), canonicalKey(name))
		})
	}
}

func TestParseAllocs(t *testing.T) {
	buf := []byte(browserRequest)
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := Parse(buf, 0); err != nil {
			panic(err)
		}
	})
	// The Request, the head string, the values array, and the map (four
	// allocations for 13 keys with Go 1.26's maps). Nothing per header.
	require.LessOrEqual(t, allocs, 8.0)
}

func BenchmarkParse(b *testing.B) {
	buf := []byte(browserRequest)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Parse(buf, 8192); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseIncomplete(b *testing.B) {
	buf := []byte(browserRequest[:len(browserRequest)-1])
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Parse(buf, 8192); err != ErrIncomplete {
			b.Fatal(err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(browserRequest), 0)
	f.Add([]byte("GET / HTTP/1.1\r\nA: 1\r\nA: 2\r\n\r\nrest"), 30)
	f.Add([]byte("GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n"), 0)
	f.Fuzz(func(t *testing.T, buf []byte, max int) {
		req, n, err := Parse(buf, max)
		if err != nil {
			if req != nil || n != 0 {
				t.Fatalf("error %v with request %v, n %d", err, req, n)
			}
			var e *Error
			if err != ErrIncomplete && (!errors.As(err, &e) || (e.Status != 400 && e.Status != 431 && e.Status != 505)) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if n <= 0 || n > len(buf) || (max > 0 && n > max) {
			t.Fatalf("n = %d out of range (len %d, max %d)", n, len(buf), max)
		}
		if string(buf[n-4:n]) != "\r\n\r\n" {
			t.Fatalf("head %q does not end in an empty line", buf[:n])
		}
		again, n2, err := Parse(buf[:n], max)
		if err != nil || n2 != n {
			t.Fatalf("re-parse of %q: n %d err %v", buf[:n], n2, err)
		}
		if again.Method != req.Method || again.RequestURI != req.RequestURI || again.Proto != req.Proto {
			t.Fatalf("re-parse differs: %+v vs %+v", again, req)
		}
		if len(again.Header) != len(req.Header) {
			t.Fatalf("re-parse headers differ: %v vs %v", again.Header, req.Header)
		}
		for k, vs := range req.Header {
			if k != textproto.CanonicalMIMEHeaderKey(k) {
				t.Fatalf("key %q not canonical", k)
			}
			if strings.Join(vs, "\x00") != strings.Join(again.Header[k], "\x00") {
				t.Fatalf("re-parse header %q: %q vs %q", k, again.Header[k], vs)
			}
			for _, v := range vs {
				if strings.ContainsAny(v, "\r\n\x00") || strings.Trim(v, " \t") != v {
					t.Fatalf("header %q value %q not clean", k, v)
				}
			}
		}
		// Any prefix that stops short of the empty line is incomplete.
		if _, _, err := Parse(buf[:n-1], max); err != ErrIncomplete {
			t.Fatalf("prefix of a good head: %v", err)
		}
	})
}
