// Command chaos is a chaos run of a gust cluster on NATS JetStream, to
// check what clients get when an instance dies or freezes, the NATS server
// restarts with its store or loses it, every client reconnects at once, or
// a client lies about where it is (issues 27 and 34), and what clients
// that send are told (issue 35): history and recovery
// (hub.Hub.SubscribeSince, gustnats.NewHistory) and acknowledged sends
// (hub.Hub.PublishOnce) under failure, with numbers a user can repeat.
//
//	chaos run [-clients 3000 -topics 100 -rate 1000 -senders 300 -phases ... ]
//
// starts a NATS server with JetStream storing in a temporary directory
// (the nats-server binary given with -nats-server, else this binary as
// "chaos nats", the same server embedded), then -instances gust server
// processes (this binary as "chaos instance", each on a port below the
// ephemeral range so that it can be started again on it), then -clients
// WebSocket clients in its own process, -clients/-topics per topic, a
// topic's clients spread over the instances, and a watcher of each
// instance's own topic (below) on the next instance.
//
// The clients follow the client's rule of hub.Hub.SubscribeSince: a client
// connects to /ws?topic=T&since=EPOCH:SEQ (empty the first time), keeps
// the epoch of the last recovered or gap notice and the sequence of the
// last message, and passes them back when it reconnects (to the next
// instance up, backoff 50 ms doubling to 1 s with jitter; -client-ping, a
// heartbeat, cuts an instance that went silent); on a gap notice with
// reset it drops what it kept and expects the history anew from its start.
// What it gets of one history, from its first join or a reset on, is a
// segment, checked on its own.
//
// Once every client has its recovered notice, the messages come from the
// senders: the first -senders clients (3 a topic by default, each on
// another instance) also send to their topic, -rate/-senders messages a
// second each, on the connection they receive on, through the instance
// they are connected to, as examples/chat's page does. A sender numbers
// its messages K = 1, 2, ... and sends each as
// {"id":"K","n":K,"at":MICROSECONDS,"a":ATTEMPT} (at: its first attempt);
// the instance publishes it with Hub.PublishOnce under the sender's name
// and the id, and once it is stored queues {"ack":"K","seq":N,"epoch":E}
// on the connection. The
// sender keeps each message until it is acknowledged, one made while it
// is disconnected too, and on every connection it makes (the same
// reconnection rules as the others') sends again the ones not
// acknowledged, in order, before anything new: a copy of one stored
// before is acknowledged at that one's position, and a frozen instance
// that wakes up and publishes a copy late has it refused.
//
// With -senders 0 a publisher (the driver's own Hub with its own NATS
// connection and HistoryBroker, one goroutine per topic) publishes -rate
// messages a second round-robin over the topics instead, each payload
// {"n":K,"at":MICROSECONDS}, K counting the topic's messages from 1, and
// learns from the broker where the stream stored each (epoch and
// sequence) or that it gave it up: Hub.Publish returns once the message is
// queued. The publisher's broker tells the run the history's epoch either
// way. Each instance publishes {"n":K,"at":MICROSECONDS} to a topic of its
// own every -beat, and says on stdout which of those it stored more than a
// second after it published them, or gave up.
//
// The schedule: -phase of publishing, then each phase of -phases, in this
// order, makes its event happen and is followed by -phase of publishing:
//
//   - kill: kill -9 of instance -kill; its clients reconnect to the others
//     (with -overlap, in phase nats instead, while nats-server is down, so
//     that they recover on instances away from NATS);
//   - nats: nats-server stopped (-nats-signal, SIGKILL by default) and
//     started again -nats-down later on the same port and store;
//   - burst: every client's connection cut at once: all reconnect;
//   - empty: nats-server stopped and started again on an empty store, the
//     instances left running: the stream is made again, a new epoch;
//   - empty-restart: the same, every instance killed with it and started
//     again, on its port, once nats-server is back;
//   - freeze: the instance holding the most clients (or -freeze-instance)
//     stopped with SIGSTOP for -freeze, then SIGCONT; its clients time out
//     and reconnect elsewhere, or stay;
//   - forged: -forged members of each kind join with a since the history
//     never gave: its epoch and the topic's last sequence + 10^9, its epoch
//     and 2^64-1, a made-up epoch, an epoch the run lost, no epoch.
//
// Then publishing stops; the driver waits for the acknowledgement of every
// message sent (or the broker's report on every message published), and
// (at most -drain) until every client has the last message stored in its
// topic in the history's epoch, and checks.
//
// What it reports (a JSON object on stdout, Markdown tables with -md), in
// all and per phase: for the senders, messages sent, acknowledged and not,
// ack latency (a message's first write to its acknowledgement) p50/p99/max,
// messages resent, those acknowledged as duplicates (at an earlier copy's
// position) and those a resend stored, and per sender, checked against
// what its topic's clients got of each epoch, messages acknowledged out of
// its order or after a later one in the stream, stored twice, not at the
// position acknowledged, acknowledged and then gone with a lost store;
// for the publisher, messages handed over, stored and failed, the longest
// time publishes kept failing and how many failed outside the store's
// outages (from the stop to -grace after JetStream answered again), store
// latency; publish-to-delivery latency (a message's first send to its
// arrival at each regular client, replays after reconnecting included)
// p50/p99/max; disconnections, recovery time (disconnection to recovered
// notice) p50/p99/max; per client and segment, messages lost (stored in
// the segment's epoch and never received, counted against what the
// history held when the client came back: -keep per topic; for an epoch
// whose store was lost, up to the last message the client got — the rest
// is gone with the store, and a client that missed one stored more than
// -grace before the loss was muted), duplicated (a counter twice in a
// segment), out of order (a lower sequence or counter), received at
// another epoch or sequence than stored at; gap notices, resets, and
// resets that no loss of the store explains; for the phases that lose the
// store, the clients told to reset into the new epoch and those that got
// its messages; the longest pause between two messages; the instances'
// own messages that reached a client late, and those the frozen instance
// stored late or gave up; for phase forged, by kind, the members told to
// reset first, recovered, and that got live messages after; each
// instance's Hub counters and NATS outages. The log tells the first 40 odd
// things (duplicates, messages out of order, lost, gaps, epochs changing
// without a reset).
//
// It exits 1 unless every message a sender sent was acknowledged, at a
// position after its earlier messages', where its topic's clients got it
// and nowhere else in that epoch; nothing is lost, duplicated, out of
// order, misnumbered or of another topic, no gap notice without reset and
// no reset that no loss explains came, no client was muted, every client was told to reset
// into each new epoch and got its messages, every forged member was told
// to reset first and got the kept history and live messages, no publish
// failed outside the store's outages (and -grace after) and the broker
// reported on all, and every client is back and has its topic's last
// message. -phases "" makes a steady run, without failures, for the ack
// and delivery latencies.
//
//	chaos instance -addr 127.0.0.1:PORT -nats nats://127.0.0.1:4222 [-beat 100ms -beat-topic beat-0]
//
// is one gust server: a Hub whose Broker is a gustnats.HistoryBroker (file
// storage, -keep messages kept per topic), connections with
// OutboxCloseSlow; a client connects to
// /ws?topic=T&since=EPOCH:SEQ[&sender=NAME] (hub.ParsePosition's form) and
// the handler calls Hub.SubscribeSince(c, T, since). A sender's name is 1
// to 64 bytes of printable text without '/' (else the connection is closed
// with 1008, as it is for a message from a connection without a sender or
// not of the form above); its messages are published to T with
// Hub.PublishOnce(T, ..., NAME+"/"+id, ack), stored as
// {"from":NAME,"id":ID,"n":K,"at":MICROSECONDS,"a":ATTEMPT}, and
// acknowledged with WriteAsync; one not stored closes the connection with
// 1013, for the sender to send it again. It prints "ready ADDR" once it
// listens, "late {...}" for each of its own messages stored late or given
// up, and on SIGTERM shuts down and prints its counters as JSON.
//
//	chaos nats -addr 127.0.0.1:4222 -sd DIR
//
// is a NATS server with JetStream storing in DIR (nats-server -js -sd DIR,
// embedded), for when no nats-server binary is at hand (the tests).
//
// scripts/chaos-nats builds this command and nats-server, runs it, and
// writes benchmark/results/<date>-chaos-nats.{md,jsonl}; see
// benchmark/README.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	os.Exit(dispatch(os.Args[1:]))
}

// dispatch runs the role args[0] names with the rest of args and returns
// the exit code.
func dispatch(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: chaos run|instance|nats [flags] (chaos ROLE -h lists the flags)")
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		return runMain(args[1:])
	case "instance":
		err = instanceMain(args[1:])
	case "nats":
		err = natsMain(args[1:])
	default:
		fmt.Fprintf(os.Stderr, "chaos: unknown role %q: want run, instance or nats\n", args[0])
		return 2
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
