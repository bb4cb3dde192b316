package gust

import (
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type jsonPoint struct {
	Name string   `json:"name"`
	X, Y int      `json:",omitempty"`
	Tags []string `json:"tags"`
}

// TestWriteJSONRoundTrip sends a struct from gust's client to gust's server,
// which decodes it and sends it back with WriteJSON, with and without
// compression, small and over the compression threshold.
func TestWriteJSONRoundTrip(t *testing.T) {
	t.Parallel()
	for _, compress := range []bool{false, true} {
		srv := newRecorder()
		srv.message = func(c *Conn, m *Message) {
			defer m.Close()
			var p jsonPoint
			if err := m.DecodeJSON(&p); err != nil {
				c.Close(StatusUnsupportedData, err.Error())
				return
			}
			p.X++
			c.WriteJSON(p)
		}
		opts := Options{Compression: CompressionOptions{Enabled: compress}}
		addr := startServer(t, srv, &opts)
		c, _, h := dialTest(t, "ws://"+addr+"/", &DialOptions{Options: opts})
		require.Equal(t, compress, c.Compressed())
		for _, tags := range [][]string{{"a", "<b>"}, strings.Split(strings.Repeat("tag,", 500), ",")} {
			in := jsonPoint{Name: "p", X: 1, Y: 2, Tags: tags}
			require.NoError(t, c.WriteJSON(in))
			m := h.waitMessage(t)
			require.Equal(t, OpText, m.op)
			in.X++
			want, err := json.Marshal(in)
			require.NoError(t, err)
			require.Equal(t, string(want), string(m.data), "json.Marshal's bytes, without Encode's newline")
			var out jsonPoint
			require.NoError(t, (&Message{Opcode: OpText, Data: m.data}).DecodeJSON(&out))
			require.Equal(t, in, out)
		}
	}
}

func TestDecodeJSONInvalid(t *testing.T) {
	t.Parallel()
	var v jsonPoint
	var se *json.SyntaxError
	require.ErrorAs(t, (&Message{Opcode: OpText, Data: []byte(`{"name":`)}).DecodeJSON(&v), &se)
	require.Error(t, (&Message{Opcode: OpText, Data: []byte(`{"name":1}`)}).DecodeJSON(&v))
	require.Error(t, new(Message).DecodeJSON(&v), "a closed message has no JSON")
	require.NoError(t, (&Message{Opcode: OpBinary, Data: []byte(`{"name":"b"}`)}).DecodeJSON(&v), "binary is accepted")
	require.Equal(t, "b", v.Name)
}

// TestWriteJSONUnsupportedSendsNothing checks that a value encoding/json
// refuses returns its error and puts no frame on the wire: the next frame
// the peer reads is the message written after it.
func TestWriteJSONUnsupportedSendsNothing(t *testing.T) {
	t.Parallel()
	srv := newRecorder()
	addr := startServer(t, srv, nil)
	rc := dialRaw(t, addr, nil)
	c := srv.waitOpen(t)
	var ute *json.UnsupportedTypeError
	require.ErrorAs(t, c.WriteJSON(make(chan int)), &ute)
	require.ErrorAs(t, c.WriteJSON(map[string]any{"f": func() {}}), &ute)
	require.NoError(t, c.WriteJSON("after"))
	rc.expectMessage(OpText, []byte(`"after"`))
}

func TestWriteJSONOnClosedConn(t *testing.T) {
	t.Parallel()
	srv := newRecorder()
	addr := startServer(t, srv, nil)
	dialRaw(t, addr, nil)
	c := srv.waitOpen(t)
	require.NoError(t, c.CloseNow())
	srv.waitClose(t)
	require.True(t, errors.Is(c.WriteJSON(1), net.ErrClosed))
	require.True(t, errors.Is(new(Conn).WriteJSON(1), net.ErrClosed), "a zero Conn")
}
