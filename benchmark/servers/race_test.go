//go:build race

package servers

// nbio v1.6.8 races in its own accept path (nbhttp/engine.go:340 writes a connection's fields
// that nbhttp/processor.go:230 reads on a poller goroutine), outside this module's code.
func init() {
	skipUnderRace["nbio"] = "nbio v1.6.8 has a data race in its accept path (nbhttp engine.go:340 / processor.go:230)"
	skipUnderRace["nbio-tls"] = skipUnderRace["nbio"] // the same accept path
}
