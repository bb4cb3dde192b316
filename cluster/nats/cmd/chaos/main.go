// Command chaos is a chaos run of a gust cluster on NATS JetStream, to
// check that clients lose nothing when an instance dies or the NATS server
// restarts (issue 27): history and recovery (hub.Hub.SubscribeSince,
// gustnats.NewHistory) under failure, with numbers a user can repeat.
//
//	chaos run [-clients 3000 -topics 100 -rate 1000 ...]
//
// starts a NATS server with JetStream storing in a temporary directory
// (the nats-server binary given with -nats-server, else this binary as
// "chaos nats", the same server embedded), then -instances gust server
// processes (this binary as "chaos instance"), then -clients WebSocket
// clients in its own process, -clients/-topics per topic, a topic's
// clients spread over the instances. Each client connects to
// /ws?topic=T&since=0 and keeps the last sequence it received. Once every
// client has its recovered notice, a publisher (a Hub with its own NATS
// connection and a HistoryBroker, in the driver's process, one goroutine
// per topic) publishes -rate messages a second round-robin over the
// topics, each payload {"n":K}, K counting the topic's messages from 1.
// The schedule, each step -phase long: publish; kill -9 one instance (its
// clients reconnect to the next live instance with since = their last
// sequence, with backoff from 50 ms doubling to 1 s, with jitter); publish;
// stop nats-server (SIGKILL by default, -nats-signal TERM for a clean
// stop), start it again after -nats-down on the same port and store;
// publish; stop publishing. The publisher catches up with its schedule
// after the outage. With -overlap the instance is killed once nats-server
// has stopped instead, so that its clients recover on instances that are
// away from NATS. The driver then waits (at most -drain) until every
// client has the last message published to its topic, and checks.
//
// What it reports (a JSON object on stdout, a Markdown table with -md):
// messages published (Hub.Publish returned nil) and publish errors (the
// message may or may not be stored: not counted as lost if missing, nor
// as duplicated if it arrives); delivered (messages the clients received,
// replays included); lost (for each client, the messages published to its
// topic that it never received: all are, as every client subscribed
// before the first); duplicated (a message received twice: the same
// sequence, or the same counter under a new sequence); out of order (a
// sequence or counter lower than one received before); gap notices;
// recovery time (from a client's disconnection to its recovered notice)
// p50/p99/max over the disconnections; publish latency, overall and while
// NATS was restarting; the longest pause between two messages a client saw
// in each phase; the instances' Hub counters, NATS outages and warnings.
// The log tells the first 20 duplicates: which client, how long after its
// recovered notice, which sequence.
// It exits 1 unless lost, duplicated, out of order, gaps and messages for
// another topic are all 0 and every client recovered and got its topic's
// last message.
//
//	chaos instance -addr 127.0.0.1:0 -nats nats://127.0.0.1:4222
//
// is one gust server: a Hub whose Broker is a gustnats.HistoryBroker (the
// defaults: file storage, 1,000 messages kept per topic), connections with
// OutboxCloseSlow; a client connects to /ws?topic=T&since=N and the
// handler calls Hub.SubscribeSince(c, T, N). It prints "ready ADDR" once
// it listens; on SIGTERM it shuts down and prints its counters as JSON.
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
