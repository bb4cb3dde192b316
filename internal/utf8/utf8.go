// Package utf8 validates UTF-8 text, in one piece or as a stream.
//
// A WebSocket endpoint must fail a text message whose payload is not valid
// UTF-8 (RFC 6455 section 8.1), and it should do so as soon as possible:
// the [Validator] reports failure at the first byte after which no valid
// text can follow, even in the middle of a frame or of a code point split
// across frames. This is the behaviour the Autobahn test suite checks in
// cases 6.4.1 to 6.4.4.
package utf8

import "encoding/binary"

// States of the validating automaton. Each names what the next byte must
// be. The values are multiplied by numClasses so that a state plus a byte
// class indexes the transition table directly.
const (
	sAccept   = iota * numClasses // on a code point boundary
	sReject                       // invalid; sticky
	sNeed1                        // one continuation byte (80..BF) to go
	sNeed2                        // two continuation bytes to go
	sNeed3                        // three continuation bytes to go
	sE0                           // after E0: A0..BF, then one more (no overlongs)
	sED                           // after ED: 80..9F, then one more (no surrogates)
	sF0                           // after F0: 90..BF, then two more (no overlongs)
	sF4                           // after F4: 80..8F, then two more (max U+10FFFF)
	numStates = 9
)

// Byte classes: the byte ranges that the states above tell apart.
const (
	cASCII = iota // 00..7F
	c80           // 80..8F continuation
	c90           // 90..9F continuation
	cA0           // A0..BF continuation
	cBad          // C0, C1, F5..FF: never valid
	cC2           // C2..DF: lead of 2
	cE0           // E0
	cE1           // E1..EC, EE, EF: lead of 3
	cED           // ED
	cF0           // F0
	cF1           // F1..F3: lead of 4
	cF4           // F4
	numClasses
)

var byteClass = func() (t [256]uint8) {
	for b := range t {
		switch {
		case b < 0x80:
			t[b] = cASCII
		case b < 0x90:
			t[b] = c80
		case b < 0xA0:
			t[b] = c90
		case b < 0xC0:
			t[b] = cA0
		case b < 0xC2:
			t[b] = cBad
		case b < 0xE0:
			t[b] = cC2
		case b == 0xE0:
			t[b] = cE0
		case b == 0xED:
			t[b] = cED
		case b < 0xF0:
			t[b] = cE1
		case b == 0xF0:
			t[b] = cF0
		case b < 0xF4:
			t[b] = cF1
		case b == 0xF4:
			t[b] = cF4
		default:
			t[b] = cBad
		}
	}
	return t
}()

// transition[state+class] is the next state; every pair not listed below
// leads to sReject.
var transition = func() (t [numStates * numClasses]uint8) {
	for i := range t {
		t[i] = sReject
	}
	set := func(state uint8, next uint8, classes ...uint8) {
		for _, c := range classes {
			t[state+c] = next
		}
	}
	set(sAccept, sAccept, cASCII)
	set(sAccept, sNeed1, cC2)
	set(sAccept, sE0, cE0)
	set(sAccept, sNeed2, cE1)
	set(sAccept, sED, cED)
	set(sAccept, sF0, cF0)
	set(sAccept, sNeed3, cF1)
	set(sAccept, sF4, cF4)

	set(sNeed1, sAccept, c80, c90, cA0)
	set(sNeed2, sNeed1, c80, c90, cA0)
	set(sNeed3, sNeed2, c80, c90, cA0)
	set(sE0, sNeed1, cA0)
	set(sED, sNeed1, c80, c90)
	set(sF0, sNeed2, c90, cA0)
	set(sF4, sNeed2, c80)
	return t
}()

// Validator checks UTF-8 text that arrives in pieces. It fails fast:
// [Validator.Feed] returns false as soon as the bytes fed so far cannot be
// the start of any valid UTF-8 text, whether the offending byte begins,
// continues or would complete a code point.
//
// The zero value is ready to use. A Validator is not safe for concurrent
// use.
type Validator struct {
	state uint8
}

// Feed validates the next piece of the text. It returns false once the
// text fed since the last [Validator.Reset] (or since the zero value) can
// no longer be valid, and keeps returning false until Reset. A true result
// does not mean the text is complete: a code point may still be pending;
// see [Validator.Complete].
func (v *Validator) Feed(p []byte) bool {
	// Text that begins with a long stretch of ASCII (most JSON is ASCII
	// throughout) skips it 64 bytes at a time (SSE2 on amd64). Here, not in
	// feed's loop: a call there, or anywhere in feed, costs text with a
	// code point every few words more than it saves.
	if v.state == sAccept && len(p) >= 128 {
		p = p[asciiRun(&p[0], len(p)):]
	}
	return v.feed(p)
}

// feed is Feed past the ASCII at the start of p.
func (v *Validator) feed(p []byte) bool {
	// Capping p lets the compiler skip recomputing the capacity on every
	// reslice below, which is measurable on long ASCII runs.
	p = p[:len(p):len(p)]
	s := v.state
	// Finish a code point left pending by the previous call, one byte at a
	// time through the automaton.
	for s != sAccept && len(p) > 0 {
		s = transition[s+byteClass[p[0]]]
		if s == sReject {
			v.state = s
			return false
		}
		p = p[1:]
	}
	// Between code points, whole code points at a time while at least four
	// bytes are left; the automaton takes over for the last few bytes, where
	// a code point may be cut off.
	for len(p) >= 4 {
		b := p[0]
		if b < 0x80 {
			// One ASCII byte suggests more: skip them 8, then 32 at a
			// time. The > comparisons keep every reslice strictly inside p.
			p = p[1:]
			if len(p) > 8 && word(p)&hiBits == 0 {
				p = p[8:]
				for len(p) > 32 && (word(p)|word(p[8:])|word(p[16:])|word(p[24:]))&hiBits == 0 {
					p = p[32:]
				}
			}
			continue
		}
		l := leads[b]
		if p[1] < l.lo || p[1] > l.hi { // also rejects bad leads: lo > hi
			return v.fail()
		}
		switch l.n {
		case 2:
			p = p[2:]
		case 3:
			if p[2]&0xC0 != 0x80 {
				return v.fail()
			}
			p = p[3:]
		default:
			if p[2]&0xC0 != 0x80 || p[3]&0xC0 != 0x80 {
				return v.fail()
			}
			p = p[4:]
		}
	}
	for _, b := range p {
		s = transition[s+byteClass[b]]
	}
	v.state = s
	return s != sReject
}

func (v *Validator) fail() bool {
	v.state = sReject
	return false
}

const hiBits = 0x8080808080808080

// word loads the first eight bytes of p.
func word(p []byte) uint64 { return binary.LittleEndian.Uint64(p) }

// leadInfo describes a byte at the start of a code point: the length of
// its sequence and the range allowed for the second byte, which is
// narrower than 80..BF after E0, ED, F0 and F4. Bytes that cannot start a
// multi-byte sequence have an empty range (lo > hi).
type leadInfo struct {
	n, lo, hi uint8
}

var leads = func() (t [256]leadInfo) {
	for b := range t {
		t[b] = leadInfo{0, 0xFF, 0}
	}
	for b := 0xC2; b <= 0xDF; b++ {
		t[b] = leadInfo{2, 0x80, 0xBF}
	}
	for b := 0xE0; b <= 0xEF; b++ {
		t[b] = leadInfo{3, 0x80, 0xBF}
	}
	t[0xE0].lo = 0xA0
	t[0xED].hi = 0x9F
	for b := 0xF0; b <= 0xF4; b++ {
		t[b] = leadInfo{4, 0x80, 0xBF}
	}
	t[0xF0].lo = 0x90
	t[0xF4].hi = 0x8F
	return t
}()

// Complete reports whether the text fed so far is valid and ends on a code
// point boundary, that is, whether it is valid UTF-8 as a whole.
func (v *Validator) Complete() bool {
	return v.state == sAccept
}

// Reset makes v ready for a new text, as if it were the zero value.
func (v *Validator) Reset() {
	v.state = sAccept
}

// Valid reports whether p is entirely valid UTF-8. It agrees with
// [unicode/utf8.Valid]; it is the same check as [Validator], which
// benchmarks as fast on ASCII and faster on multi-byte text.
func Valid(p []byte) bool {
	var v Validator
	return v.Feed(p) && v.Complete()
}
