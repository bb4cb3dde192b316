package gustnats

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func decodeOK(t testing.TB, b []byte) presenceMsg {
	t.Helper()
	m, ok, err := decodePresence(b)
	require.NoError(t, err)
	require.True(t, ok)
	return m
}

func TestPresenceWire(t *testing.T) {
	m := decodeOK(t, encodeHeartbeat("id1", 7, true))
	require.Equal(t, presenceMsg{kind: kindHeartbeat, from: "id1", epoch: 7, hello: true}, m)
	m = decodeOK(t, encodeBye("id1", 0))
	require.Equal(t, presenceMsg{kind: kindBye, from: "id1"}, m)
	m = decodeOK(t, encodeChange(kindLeave, "id1", 1, "a room", "é"))
	require.Equal(t, presenceMsg{kind: kindLeave, from: "id1", epoch: 1, topic: "a room", member: "é"}, m)

	n := uint64(40)
	msgs, qids := encodeQueries("id1", 2, []string{"a", "", strings.Repeat("t", 300), "b"}, 100, func() uint64 { n++; return n })
	require.Equal(t, []uint64{41, 42, 43}, qids, "split at 100 bytes, the long topic alone")
	var topics []string
	for i, b := range msgs {
		m := decodeOK(t, b)
		require.Equal(t, qids[i], m.qid)
		topics = append(topics, m.topics...)
	}
	require.Equal(t, []string{"a", "", strings.Repeat("t", 300), "b"}, topics)

	// A later version's kind is ignored; a later version's extra field too.
	_, ok, err := decodePresence([]byte{'z', 1, 'x', 0})
	require.NoError(t, err)
	require.False(t, ok)
	m = decodeOK(t, append(encodeHeartbeat("id1", 1, false), 9, 9))
	require.False(t, m.hello)

	for _, bad := range [][]byte{nil, encodeBye("a.b", 0), encodeBye("", 0), {kindJoin}, {kindJoin, 5, 'a'}, {kindHeartbeat, 0, 0, 2}, {kindQuery, 0, 0, 1, 200, 1}} {
		_, _, err := decodePresence(bad)
		require.Error(t, err, "%q", bad)
	}
}

// The answer to a query splits long member lists over messages of about
// the limit; the receiver joins them back with the entries' more flags.
func TestStateEncoderSplits(t *testing.T) {
	var many []string
	for i := range 50 {
		many = append(many, fmt.Sprint("member", i))
	}
	huge := strings.Repeat("h", 500)
	in := []topicState{
		{topic: "empty"},
		{topic: "many", members: many},
		{topic: "huge", members: []string{"x", huge, "y"}},
		{topic: "last", members: []string{"z"}},
	}
	const limit = 120
	e := newStateEncoder("id1", 3, 9, limit)
	for _, s := range in {
		e.add(s.topic, s.members)
	}
	msgs := e.finish()
	require.Greater(t, len(msgs), 5)
	got := map[string][]string{}
	var order []string
	partial := map[string]bool{}
	for i, b := range msgs {
		m := decodeOK(t, b)
		require.Equal(t, uint64(9), m.qid)
		require.Equal(t, i == len(msgs)-1, m.last, "message %d", i)
		if len(b) > limit {
			require.Len(t, m.states, 1, "only a lone member may pass the limit")
			require.Equal(t, []string{huge}, m.states[0].members)
		}
		for _, s := range m.states {
			if !partial[s.topic] {
				order = append(order, s.topic)
			}
			got[s.topic] = append(got[s.topic], s.members...)
			partial[s.topic] = s.more
		}
	}
	require.Equal(t, []string{"empty", "many", "huge", "last"}, order)
	for _, s := range in {
		require.Equal(t, s.members, got[s.topic], s.topic)
		require.False(t, partial[s.topic])
	}

	// An answer with nothing to say is one message, flagged last.
	msgs = newStateEncoder("id1", 3, 10, limit).finish()
	require.Len(t, msgs, 1)
	m := decodeOK(t, msgs[0])
	require.True(t, m.last)
	require.Empty(t, m.states)
}

// reencode encodes m again, as its sender would have.
func reencode(m presenceMsg) [][]byte {
	switch m.kind {
	case kindHeartbeat:
		return [][]byte{encodeHeartbeat(m.from, m.epoch, m.hello)}
	case kindBye:
		return [][]byte{encodeBye(m.from, m.epoch)}
	case kindJoin, kindLeave:
		return [][]byte{encodeChange(m.kind, m.from, m.epoch, m.topic, m.member)}
	case kindQuery:
		msgs, _ := encodeQueries(m.from, m.epoch, m.topics, 1<<30, func() uint64 { return m.qid })
		return msgs
	case kindState:
		e := newStateEncoder(m.from, m.epoch, m.qid, 1<<30)
		for _, s := range m.states {
			e.add(s.topic, s.members)
		}
		return e.finish()
	}
	return nil
}

// Whatever arrives, decoding does not panic or allocate past the input,
// and what decodes encodes back to the same message.
func FuzzPresenceDecode(f *testing.F) {
	f.Add(encodeHeartbeat("0123456789abcdef", 3, true))
	f.Add(encodeBye("x", 1))
	f.Add(encodeChange(kindJoin, "x", 0, "room", "ann"))
	msgs, _ := encodeQueries("x", 2, []string{"room", "other"}, 1000, func() uint64 { return 5 })
	f.Add(msgs[0])
	e := newStateEncoder("x", 2, 5, 1000)
	e.add("room", []string{"ann", "bob"})
	e.add("other", nil)
	f.Add(e.finish()[0])
	f.Fuzz(func(t *testing.T, b []byte) {
		m, ok, err := decodePresence(b)
		if err != nil || !ok {
			return
		}
		out := reencode(m)
		if m.kind == kindQuery && len(m.topics) == 0 {
			require.Empty(t, out, "a query for nothing is never sent")
			return
		}
		require.Len(t, out, 1)
		again := decodeOK(t, out[0])
		if m.kind == kindState {
			// Entries that went on are joined back into one.
			require.Equal(t, m.qid, again.qid)
			require.True(t, again.last)
			return
		}
		require.Equal(t, m, again)
	})
}
