package handshake

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExtensions(t *testing.T) {
	tests := []struct {
		in   []string
		want []Extension
		bad  bool
	}{
		{in: nil, want: nil},
		{in: []string{"permessage-deflate"}, want: []Extension{{Name: "permessage-deflate"}}},
		{in: []string{"permessage-deflate; client_max_window_bits"}, want: []Extension{
			{Name: "permessage-deflate", Params: []Param{{Name: "client_max_window_bits"}}}}},
		{in: []string{`permessage-deflate; server_max_window_bits=10; client_max_window_bits="12", x-ext`}, want: []Extension{
			{Name: "permessage-deflate", Params: []Param{{"server_max_window_bits", "10", true}, {"client_max_window_bits", "12", true}}},
			{Name: "x-ext"}}},
		{in: []string{"a", " , b ;p=1"}, want: []Extension{{Name: "a"}, {Name: "b", Params: []Param{{"p", "1", true}}}}},
		{in: []string{"a;"}, bad: true},
		{in: []string{"a;p="}, bad: true},
		{in: []string{`a;p="1 2"`}, bad: true},
		{in: []string{`a;p="unterminated`}, bad: true},
		{in: []string{"a b"}, bad: true},
		{in: []string{";p"}, bad: true},
	}
	for _, tt := range tests {
		h := http.Header{"Sec-Websocket-Extensions": tt.in}
		got, err := Extensions(h)
		if tt.bad {
			require.Error(t, err, "%q", tt.in)
			continue
		}
		require.NoError(t, err, "%q", tt.in)
		require.Equal(t, tt.want, got, "%q", tt.in)
	}
}

func FuzzExtensions(f *testing.F) {
	for _, s := range []string{
		"permessage-deflate",
		"permessage-deflate; client_max_window_bits; server_no_context_takeover",
		`permessage-deflate; server_max_window_bits="10", permessage-deflate`,
		`x; a="b\"c"`,
		"a;;b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		exts, _ := Extensions(http.Header{"Sec-Websocket-Extensions": {s}})
		for _, e := range exts {
			require.NotEmpty(t, e.Name)
			for _, p := range e.Params {
				require.NotEmpty(t, p.Name)
				if p.HasValue {
					require.True(t, isToken(p.Value), "%q", p.Value)
				}
			}
		}
	})
}
