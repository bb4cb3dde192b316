//go:build !purego

#include "textflag.h"

// func xorKey64(dst, src *byte, n int, key uint64)
//
// dst[i] = src[i] ^ key's byte i%8, for n bytes, n a positive multiple of
// 64: four 16-byte SSE2 words per step (SSE2 is part of amd64's baseline).
TEXT ·xorKey64(SB), NOSPLIT, $0-32
	MOVQ       dst+0(FP), DI
	MOVQ       src+8(FP), SI
	MOVQ       n+16(FP), CX
	MOVQ       key+24(FP), X0
	PUNPCKLQDQ X0, X0

loop:
	MOVOU 0(SI), X1
	MOVOU 16(SI), X2
	MOVOU 32(SI), X3
	MOVOU 48(SI), X4
	PXOR  X0, X1
	PXOR  X0, X2
	PXOR  X0, X3
	PXOR  X0, X4
	MOVOU X1, 0(DI)
	MOVOU X2, 16(DI)
	MOVOU X3, 32(DI)
	MOVOU X4, 48(DI)
	ADDQ  $64, SI
	ADDQ  $64, DI
	SUBQ  $64, CX
	JNZ   loop
	RET
