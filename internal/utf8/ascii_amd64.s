//go:build !purego

#include "textflag.h"

// func asciiRun(p *byte, n int) int
//
// The length of the longest prefix of p[:n] made of whole 64-byte blocks
// of ASCII bytes: four 16-byte SSE2 words ORed, their high bits tested at
// once (PMOVMSKB).
TEXT ·asciiRun(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	XORQ AX, AX

loop:
	CMPQ     CX, $64
	JB       done
	MOVOU    (SI)(AX*1), X0
	MOVOU    16(SI)(AX*1), X1
	MOVOU    32(SI)(AX*1), X2
	MOVOU    48(SI)(AX*1), X3
	POR      X1, X0
	POR      X3, X2
	POR      X2, X0
	PMOVMSKB X0, DX
	TESTL    DX, DX
	JNZ      done
	ADDQ     $64, AX
	SUBQ     $64, CX
	JMP      loop

done:
	MOVQ AX, ret+16(FP)
	RET
