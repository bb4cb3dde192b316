package main

import (
	"bytes"
	"strconv"

	gustnats "github.com/gustws/gust/cluster/nats"
	"github.com/gustws/gust/hub"
)

// watchedBroker is a HistoryBroker that tells, for each message a Hub hands
// to PublishAsync, where the stream stored it or why it did not: Hub.Publish
// returns once the message is queued, and the Hub's own report only logs a
// failure. The message is known by the counter in its payload ({"n":K,...}).
type watchedBroker struct {
	*gustnats.HistoryBroker
	stored func(topic string, n uint64, pos hub.Position, err error)
}

func (b *watchedBroker) PublishAsync(topic string, msg []byte, id string, done func(hub.Position, error)) error {
	n, _ := counterOf(msg) // 0: not one of ours; reported as such
	return b.HistoryBroker.PublishAsync(topic, msg, id, func(pos hub.Position, err error) {
		b.stored(topic, n, pos, err)
		if done != nil {
			done(pos, err)
		}
	})
}

var counterKey = []byte(`{"n":`)

// counterOf reads K from the last {"n":K in msg: the payload, which ends
// the Hub's envelope.
func counterOf(msg []byte) (uint64, bool) {
	i := bytes.LastIndex(msg, counterKey)
	if i < 0 {
		return 0, false
	}
	digits := msg[i+len(counterKey):]
	end := 0
	for end < len(digits) && digits[end] >= '0' && digits[end] <= '9' {
		end++
	}
	n, err := strconv.ParseUint(string(digits[:end]), 10, 64)
	if err != nil || n == 0 {
		return 0, false
	}
	return n, true
}
