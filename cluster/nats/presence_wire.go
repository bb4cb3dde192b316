package gustnats

import (
	"encoding/binary"
	"errors"
)

// The presence messages, pure functions over bytes. Every message starts
// with its kind, the sending instance's ID and its epoch (a counter it
// raises on each reconnect); then, by kind:
//
//	heartbeat  hello (a byte: 1 asks the receivers to answer with theirs)
//	bye        nothing: the sender closed, drop its members
//	join       topic, member
//	leave      topic, member
//	query      query ID, count, topics: "answer with your members of these"
//	state      query ID, last (a byte: 1 ends the answer), then entries to
//	           the end: topic, more (a byte: 1 if the topic's members go
//	           on in the next message), count, members
//
// Strings are a uvarint length and the bytes, numbers uvarints. Decoders
// ignore bytes after the fields they know (except in state, whose entries
// run to the end) and kinds they do not know, so later versions can add.
const (
	kindHeartbeat = 'h'
	kindBye       = 'b'
	kindJoin      = 'j'
	kindLeave     = 'l'
	kindQuery     = 'q'
	kindState     = 's'
)

// presenceMsg is a decoded presence message.
type presenceMsg struct {
	kind  byte
	from  string
	epoch uint64

	hello         bool         // heartbeat
	topic, member string       // join, leave
	qid           uint64       // query, state
	topics        []string     // query
	last          bool         // state
	states        []topicState // state
}

// topicState is one topic's entry in a state message.
type topicState struct {
	topic   string
	more    bool // the topic's members go on in the next message
	members []string
}

var errBadPresenceMsg = errors.New("malformed presence message")

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendHeader(b []byte, kind byte, from string, epoch uint64) []byte {
	b = append(b, kind)
	b = appendString(b, from)
	return binary.AppendUvarint(b, epoch)
}

func encodeHeartbeat(from string, epoch uint64, hello bool) []byte {
	return appendBool(appendHeader(nil, kindHeartbeat, from, epoch), hello)
}

func encodeBye(from string, epoch uint64) []byte {
	return appendHeader(nil, kindBye, from, epoch)
}

// encodeChange encodes a join (kindJoin) or a leave (kindLeave).
func encodeChange(kind byte, from string, epoch uint64, topic, member string) []byte {
	b := appendHeader(nil, kind, from, epoch)
	b = appendString(b, topic)
	return appendString(b, member)
}

// encodeQueries encodes a query for topics, in as many messages of about
// limit bytes as it takes, each with its own query ID from nextQID.
func encodeQueries(from string, epoch uint64, topics []string, limit int, nextQID func() uint64) (msgs [][]byte, qids []uint64) {
	for len(topics) > 0 {
		n, size := 0, 0
		for n < len(topics) && (n == 0 || size+len(topics[n])+binary.MaxVarintLen64 <= limit) {
			size += len(topics[n]) + binary.MaxVarintLen64
			n++
		}
		qid := nextQID()
		b := appendHeader(nil, kindQuery, from, epoch)
		b = binary.AppendUvarint(b, qid)
		b = binary.AppendUvarint(b, uint64(n))
		for _, t := range topics[:n] {
			b = appendString(b, t)
		}
		msgs, qids = append(msgs, b), append(qids, qid)
		topics = topics[n:]
	}
	return msgs, qids
}

// stateEncoder builds the answer to a query: state messages of about limit
// bytes (a message holds at least one member, whatever its size), the
// last one flagged.
type stateEncoder struct {
	header []byte // kind, from, epoch, qid: each message's start
	limit  int
	msgs   [][]byte
	cur    []byte
}

func newStateEncoder(from string, epoch, qid uint64, limit int) *stateEncoder {
	h := appendHeader(nil, kindState, from, epoch)
	h = binary.AppendUvarint(h, qid)
	return &stateEncoder{header: h, limit: limit}
}

// add appends topic's members, over several messages if they do not fit.
func (e *stateEncoder) add(topic string, members []string) {
	overhead := len(topic) + 3*binary.MaxVarintLen64
	for {
		if e.cur != nil && len(e.cur)+overhead > e.limit {
			e.flush()
		}
		if e.cur == nil {
			e.cur = append(append([]byte(nil), e.header...), 0) // last: set by finish
		}
		n, size := 0, len(e.cur)+overhead
		fresh := len(e.cur) == len(e.header)+1
		for n < len(members) && (size+len(members[n])+binary.MaxVarintLen64 <= e.limit || n == 0 && fresh) {
			size += len(members[n]) + binary.MaxVarintLen64
			n++
		}
		if n == 0 && len(members) > 0 {
			e.flush() // not even one member fits after what is there
			continue
		}
		more := n < len(members)
		e.cur = appendString(e.cur, topic)
		e.cur = appendBool(e.cur, more)
		e.cur = binary.AppendUvarint(e.cur, uint64(n))
		for _, m := range members[:n] {
			e.cur = appendString(e.cur, m)
		}
		members = members[n:]
		if !more {
			return
		}
		e.flush()
	}
}

func (e *stateEncoder) flush() {
	if e.cur != nil {
		e.msgs = append(e.msgs, e.cur)
		e.cur = nil
	}
}

// finish returns the messages, the last one flagged; an answer with no
// entry is one message.
func (e *stateEncoder) finish() [][]byte {
	if e.cur == nil {
		e.cur = append(append([]byte(nil), e.header...), 0)
	}
	e.flush()
	last := e.msgs[len(e.msgs)-1]
	last[len(e.header)] = 1
	return e.msgs
}

// decoder reads fields, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errBadPresenceMsg
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = errBadPresenceMsg
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) bool() bool {
	if d.err != nil {
		return false
	}
	if len(d.b) == 0 || d.b[0] > 1 {
		d.err = errBadPresenceMsg
		return false
	}
	v := d.b[0] == 1
	d.b = d.b[1:]
	return v
}

// count reads a count of items of at least one byte each: never more than
// the bytes left, so a lying count cannot make a large allocation.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err = errBadPresenceMsg
		return 0
	}
	return int(n)
}

// decodePresence decodes a presence message; ok is false for a kind it does
// not know, which the caller ignores.
func decodePresence(b []byte) (m presenceMsg, ok bool, err error) {
	if len(b) == 0 {
		return m, false, errBadPresenceMsg
	}
	d := &decoder{b: b[1:]}
	m.kind = b[0]
	m.from = d.string()
	m.epoch = d.uvarint()
	if d.err == nil && !plainToken(m.from) { // it becomes a subject token
		d.err = errBadPresenceMsg
	}
	switch m.kind {
	case kindHeartbeat:
		m.hello = d.bool()
	case kindBye:
	case kindJoin, kindLeave:
		m.topic = d.string()
		m.member = d.string()
	case kindQuery:
		m.qid = d.uvarint()
		m.topics = make([]string, d.count())
		for i := range m.topics {
			m.topics[i] = d.string()
		}
	case kindState:
		m.qid = d.uvarint()
		m.last = d.bool()
		for d.err == nil && len(d.b) > 0 {
			var s topicState
			s.topic = d.string()
			s.more = d.bool()
			s.members = make([]string, d.count())
			for i := range s.members {
				s.members[i] = d.string()
			}
			m.states = append(m.states, s)
		}
	default:
		return m, false, d.err
	}
	if d.err != nil {
		return presenceMsg{}, false, d.err
	}
	return m, true, nil
}
