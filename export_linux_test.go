package gust

import "testing"

// The hooks production code calls on Linux, nil unless a test sets them.

// hookPark has f called by each connection that parks, with whether it
// keeps its read state, until the test ends.
func hookPark(t testing.TB, f func(c *Conn, holdsRead bool)) {
	parkHook.Store(&f)
	t.Cleanup(func() { parkHook.Store(nil) })
}

// hookDup has f called before each connection's descriptor is duplicated,
// an error it returns failing the duplication as the descriptor limit
// would, until unhook is called or the test ends.
func hookDup(t testing.TB, f func(c *Conn) error) (unhook func()) {
	dupHook.Store(&f)
	unhook = func() { dupHook.Store(nil) }
	t.Cleanup(unhook)
	return unhook
}
