package gust

import "unsafe"

// stringBytes views s as bytes without copying. The bytes are only read.
func stringBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
