//go:build gust_deflate_prime

package deflate

// Built with -tags gust_deflate_prime (scripts/autobahn -prime), no
// connection holds a compressor between messages or borrows one for a
// batch: every message compressed with context takeover goes through a
// pooled compressor primed with the last bytes sent, the path that
// otherwise only many busy connections reach. For conformance runs.
func init() { holdLimit, lendLimit = 0, 0 }
