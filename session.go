package gust

import "sync"

// Session is per-connection key-value storage, safe for concurrent use. Its
// zero value is empty and ready; it holds no map until the first Store.
type Session struct {
	mu sync.RWMutex
	m  map[string]any
}

// Load returns the value stored under key, if any.
func (s *Session) Load(key string) (value any, ok bool) {
	s.mu.RLock()
	value, ok = s.m[key]
	s.mu.RUnlock()
	return value, ok
}

// Store sets the value for key.
func (s *Session) Store(key string, value any) {
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[string]any)
	}
	s.m[key] = value
	s.mu.Unlock()
}

// Delete removes key.
func (s *Session) Delete(key string) {
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
}

// Range calls f for each key and value until f returns false. f must not
// call Store or Delete on the same Session.
func (s *Session) Range(f func(key string, value any) bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for k, v := range s.m {
		if !f(k, v) {
			return
		}
	}
}
