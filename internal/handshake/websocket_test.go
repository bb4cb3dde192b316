package handshake

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAcceptKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ key, want string }{
		// RFC 6455 section 1.3.
		{"dGhlIHNhbXBsZSBub25jZQ==", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="},
		// An empty key hashes the GUID alone (checked with openssl).
		{"", "Kfh9QIsMVZcl6xEPYxPHzW8SZ8w="},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			require.Equal(t, tt.want, AcceptKey(tt.key))
		})
	}
	// A key longer than the stack buffer still works.
	long := make([]byte, 200)
	for i := range long {
		long[i] = 'k'
	}
	require.Len(t, AcceptKey(string(long)), 28)
}

func TestValidKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key  string
		want bool
	}{
		{"dGhlIHNhbXBsZSBub25jZQ==", true},
		{"AAAAAAAAAAAAAAAAAAAAAA==", true},
		{"/+/+/+/+/+/+/+/+/+/+/w==", true},
		{"", false},
		{"dGhlIHNhbXBsZSBub25jZQ=", false},         // bad padding
		{"dGhlIHNhbXBsZSBub25jZQ", false},          // no padding
		{"dGhlIHNhbXBsZSBub25jZQ==\r\n", false},    // trailing newline
		{"dGhlIHNhbXBsZSBub25j\r\nZQ==", false},    // newline the decoder would skip
		{"dGhlIHNhbXBsZSBub25jZQ=A", false},        // padding in the middle
		{"dGhlIHNhbXBsZSBub25jZSBh", false},        // 18 bytes
		{"-_-_-_-_-_-_-_-_-_-_-w==", false},        // URL alphabet
		{"dGhlIHNhbXBsZSBub25jZQ== ", false},       // trailing space
		{"dGhlIHNhbXBsZSBub25jZQ==dGhl", false},    // too long
		{"dGhlIHNhbXBsZSBub25jZSE=", false},        // 17 bytes
		{"dGhlIHNhbXBsZSBub25j\x00Q==", false},     // NUL
		{"ZGdoZWxJSE5oYlhCc1pTQnViMjVqWlE", false}, // not 24 characters
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			require.Equal(t, tt.want, ValidKey(tt.key))
		})
	}
}

func TestHasTokenAndTokens(t *testing.T) {
	t.Parallel()
	h := http.Header{
		"Connection":               {"keep-alive, Upgrade"},
		"Upgrade":                  {"websocket"},
		"Sec-Websocket-Protocol":   {"chat,  superchat ", "", " , v3,,\tv4\t"},
		"Sec-Websocket-Extensions": {"permessage-deflate; client_max_window_bits, x-foo"},
	}
	tests := []struct {
		name, field, token string
		want               bool
	}{
		{"second of list", "Connection", "upgrade", true},
		{"first of list", "connection", "KEEP-ALIVE", true},
		{"single", "Upgrade", "WebSocket", true},
		{"substring is not a token", "Connection", "keep", false},
		{"missing field", "X-Nope", "a", false},
		{"across repeated fields", "Sec-WebSocket-Protocol", "v4", true},
		{"empty token never matches", "Sec-WebSocket-Protocol", "", false},
		{"parameters are part of the element", "Sec-WebSocket-Extensions", "permessage-deflate", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, HasToken(h, tt.field, tt.token))
		})
	}

	require.Equal(t, []string{"keep-alive", "Upgrade"}, Tokens(h, "connection"))
	require.Equal(t, []string{"chat", "superchat", "v3", "v4"}, Tokens(h, "Sec-WebSocket-Protocol"))
	require.Nil(t, Tokens(h, "X-Nope"))
	require.Nil(t, Tokens(http.Header{"A": {"", " , "}}, "A"))
}

func BenchmarkAcceptKey(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		AcceptKey("dGhlIHNhbXBsZSBub25jZQ==")
	}
}

func BenchmarkHasToken(b *testing.B) {
	h := http.Header{"Connection": {"keep-alive, Upgrade"}}
	b.ReportAllocs()
	for b.Loop() {
		if !HasToken(h, "Connection", "upgrade") {
			b.Fatal("no token")
		}
	}
}

func TestValidField(t *testing.T) {
	for _, tt := range []struct {
		name string
		want bool
	}{
		{"Set-Cookie", true}, {"x-custom_1", true}, {"", false}, {"Bad Name", false},
		{"Bad:Name", false}, {"Bad\r\nName", false}, {"Ünicode", false},
	} {
		require.Equal(t, tt.want, ValidFieldName(tt.name), "%q", tt.name)
	}
	for _, tt := range []struct {
		value string
		want  bool
	}{
		{"session=abc; Path=/; HttpOnly", true}, {"", true}, {"tab\there", true}, {"café", true},
		{"a\r\nX-Injected: 1", false}, {"a\nb", false}, {"a\rb", false}, {"nul\x00", false}, {"del\x7f", false},
	} {
		require.Equal(t, tt.want, ValidFieldValue(tt.value), "%q", tt.value)
	}
}
