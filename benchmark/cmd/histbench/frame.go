package main

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// What the chat sends, as histbench tells it apart. Both builds frame a
// room's messages as {"topic","seq","data"}, a gap as {"topic","gap"} and
// the end of a recovery as {"topic","recovered"}; since the history change
// the last two carry the history's "epoch" (and a gap may say "reset").
// Presence events have no "topic": {"type":"welcome"|"join"|"leave",...}.
type frameKind uint8

const (
	kindOther frameKind = iota
	kindMessage
	kindGap
	kindRecovered
	kindJoin
	kindLeave
)

type frame struct {
	kind  frameKind
	seq   uint64 // kindMessage: its seq; kindGap: gap; kindRecovered: recovered
	epoch string // kindGap, kindRecovered: "" from the build before epochs
	reset bool   // kindGap
	name  []byte // kindJoin, kindLeave: the member; kindMessage: who said it
	text  []byte // kindMessage: data.text as sent (histbench's texts need no escaping)
}

// parseFrame tells what p is without decoding the whole of it: a member
// recovering 1,000 messages of 2 KB reads 2 MB, and histbench shares the
// machine's cores with the chat it measures. The slices it returns point
// into p.
func parseFrame(p []byte) frame {
	if rest, ok := bytes.CutPrefix(p, []byte(`{"topic":`)); ok {
		rest = skipString(rest)
		switch {
		case bytes.HasPrefix(rest, []byte(`,"seq":`)):
			f := frame{kind: kindMessage, seq: leadingUint(rest[len(`,"seq":`):])}
			f.name = field(rest, `"name":"`)
			f.text = field(rest, `"text":"`)
			return f
		case bytes.HasPrefix(rest, []byte(`,"gap":`)), bytes.HasPrefix(rest, []byte(`,"recovered":`)):
			var v struct {
				Gap       *uint64 `json:"gap"`
				Recovered *uint64 `json:"recovered"`
				Epoch     string  `json:"epoch"`
				Reset     bool    `json:"reset"`
			}
			if json.Unmarshal(p, &v) != nil {
				return frame{}
			}
			if v.Gap != nil {
				return frame{kind: kindGap, seq: *v.Gap, epoch: v.Epoch, reset: v.Reset}
			}
			return frame{kind: kindRecovered, seq: *v.Recovered, epoch: v.Epoch}
		}
		return frame{}
	}
	switch {
	case bytes.HasPrefix(p, []byte(`{"type":"join"`)):
		return frame{kind: kindJoin, name: field(p, `"name":"`)}
	case bytes.HasPrefix(p, []byte(`{"type":"leave"`)):
		return frame{kind: kindLeave, name: field(p, `"name":"`)}
	}
	return frame{}
}

// skipString returns what follows the JSON string p starts with.
func skipString(p []byte) []byte {
	if len(p) == 0 || p[0] != '"' {
		return p
	}
	for i := 1; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '"':
			return p[i+1:]
		}
	}
	return nil
}

// field returns the raw contents of the first string after key in p.
func field(p []byte, key string) []byte {
	i := bytes.Index(p, []byte(key))
	if i < 0 {
		return nil
	}
	v := p[i+len(key):]
	if j := bytes.IndexByte(v, '"'); j >= 0 {
		return v[:j]
	}
	return nil
}

func leadingUint(p []byte) uint64 {
	i := 0
	for i < len(p) && p[i] >= '0' && p[i] <= '9' {
		i++
	}
	n, _ := strconv.ParseUint(string(p[:i]), 10, 64)
	return n
}

// position is what a client sends back as since for the message numbered
// seq: EPOCH:SEQ when the chat named its epoch, the plain sequence for the
// build before epochs.
func position(epoch string, seq uint64) string {
	if epoch == "" {
		return strconv.FormatUint(seq, 10)
	}
	return epoch + ":" + strconv.FormatUint(seq, 10)
}
