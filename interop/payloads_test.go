package interop

import (
	"bytes"
	"strings"

	"github.com/gustws/gust"
)

// The payloads every peer sends; testdata/client.py, client.js, server.py,
// server.js and page.html build the same bytes.
var (
	payloadText         = "héllo, gust ✓"
	payloadBinary       = bytes.Repeat(seq256(), 4)
	payloadFragments    = []string{"frag", "mented ", "message ✓"}
	payloadFragmented   = strings.Join(payloadFragments, "")
	payloadLarge        = largePayload()
	payloadCompressible = strings.Repeat("gust compresses this line well. ", 8192)
)

func seq256() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func largePayload() []byte {
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = byte((i*7 + 3) % 251)
	}
	return b
}

// wantMessage is a message gust must have received, after the label.
type wantMessage struct {
	op   gust.Opcode
	data []byte
}

// A feature is one column of the matrix: a case the peer scripts know by
// name, what gust's side must have seen, and how its connection ends.
type feature struct {
	name  string // the case name the scripts take
	title string // the matrix column
	// received: the messages gust's server must get after the label (server direction).
	received []wantMessage
	// closeCode: the code gust's OnClose must see in the peer's close frame.
	closeCode gust.StatusCode
}

func textMsg(s string) wantMessage { return wantMessage{gust.OpText, []byte(s)} }
func binMsg(b []byte) wantMessage  { return wantMessage{gust.OpBinary, b} }

// Features a peer client runs against gust's server. The close cases echo
// one text message first. The browser cannot send fragments, and closes
// with 4000 rather than 4001 (its own case list is in page.html).
var serverFeatures = []feature{
	{name: "text", title: "text", received: []wantMessage{textMsg(payloadText)}, closeCode: 1000},
	{name: "binary", title: "binary", received: []wantMessage{binMsg(payloadBinary)}, closeCode: 1000},
	{name: "fragmented", title: "fragmented", received: []wantMessage{textMsg(payloadFragmented)}, closeCode: 1000},
	{name: "large", title: "1 MiB", received: []wantMessage{binMsg(payloadLarge)}, closeCode: 1000},
	{name: "compression", title: "deflate", received: []wantMessage{textMsg(payloadCompressible)}, closeCode: 1000},
	{name: "close-1000", title: "close 1000", received: []wantMessage{textMsg(payloadText)}, closeCode: 1000},
	{name: "close-4001", title: "close 4001", received: []wantMessage{textMsg(payloadText)}, closeCode: 4001},
	{name: "close-4000", title: "close 4000", received: []wantMessage{textMsg(payloadText)}, closeCode: 4000},
	// The peer answers gust's 4002 with its own close frame; browsers and
	// the two libraries echo the code.
	{name: "server-close-4002", title: "server close 4002", closeCode: 4002},
}

func featuresNamed(names ...string) []feature {
	var fs []feature
	for _, n := range names {
		for _, f := range serverFeatures {
			if f.name == n {
				fs = append(fs, f)
			}
		}
	}
	return fs
}

// matrixColumns orders the columns of the summary.
var matrixColumns = []string{"text", "binary", "fragmented", "1 MiB", "deflate", "close 1000", "close 4001",
	"close 4000", "server close 4002", "200 MB stream", "32 MB stream, deflate", "16 MiB random, deflate",
	"WebSocket after a request"}
