package gust

import "sync"

// values is a connection's key-value storage, safe for concurrent use,
// made by the first Set.
type values struct {
	mu sync.Mutex // not an RWMutex: every Conn holds one, and values are rarely contended
	m  map[string]any
}

// Get returns the value stored on the connection under key, if any.
func (c *Conn) Get(key string) (value any, ok bool) {
	v := c.values.Load()
	if v == nil {
		return nil, false
	}
	v.mu.Lock()
	value, ok = v.m[key]
	v.mu.Unlock()
	return value, ok
}

// Set stores value on the connection under key, for the connection's life:
// a user ID, a room. Get, Set and Delete are safe from any goroutine; a
// connection with nothing stored holds no map.
func (c *Conn) Set(key string, value any) {
	v := c.values.Load()
	if v == nil {
		c.values.CompareAndSwap(nil, &values{m: make(map[string]any)})
		v = c.values.Load()
	}
	v.mu.Lock()
	v.m[key] = value
	v.mu.Unlock()
}

// Delete removes what is stored under key.
func (c *Conn) Delete(key string) {
	v := c.values.Load()
	if v == nil {
		return
	}
	v.mu.Lock()
	delete(v.m, key)
	v.mu.Unlock()
}
