//go:build !linux

package gust

import "testing"

// Netpoll mode is Linux's: elsewhere there is no loop parse to compare.
func fuzzLoopAgrees(*testing.T, []byte, uint64, Options, *fuzzRecorder, []byte) {}
