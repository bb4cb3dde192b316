package gust

import (
	"errors"
	"unsafe"
)

var errBadOpcode = errors.New("gust: message opcode must be OpText or OpBinary")

// stringBytes views s as bytes without copying. The bytes are only read.
func stringBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
