// Package interop holds gust's interoperability tests: real WebSocket
// implementations that gust did not write — Python websockets, Node ws and
// headless Chromium — talk to gust's server (Upgrader and Server paths) and
// gust's client talks to Python and Node servers. The package has no code of
// its own; see interop_test.go, and scripts/install-interop for the peers.
package interop
