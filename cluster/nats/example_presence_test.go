package gustnats_test

import (
	"log"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/gustws/gust"
	gustnats "github.com/gustws/gust/cluster/nats"
	"github.com/gustws/gust/hub"
)

// lobby is the part of a chat server that shows who is in the room: each
// connection joins under its user's name and hears of the joins and leaves
// of every instance, from its own instance's view.
type lobby struct {
	gust.BuiltinEventHandler
	presence hub.Presence
}

func (l *lobby) OnOpen(c *gust.Conn) {
	name := "ann" // in a real server, from the request (Upgrader.OnRequest)
	c.Set("name", name)
	// Join first: when this instance had nobody in the room, it waits for
	// the other instances' members, so that Members lists them.
	if err := l.presence.Join("lobby", name); err != nil {
		log.Printf("presence: %v", err) // joined here; the others learn of it once NATS is back
	}
	stop, err := l.presence.Watch("lobby", func(ev hub.PresenceEvent) {
		verb := " left"
		if ev.Joined {
			verb = " joined"
		}
		c.WriteAsync(gust.OpText, []byte(ev.Member+verb), nil)
	})
	if err != nil {
		c.Close(gust.StatusInternalError, "")
		return
	}
	c.Set("stop", stop)
	members := l.presence.Members(nil, "lobby")
	c.WriteAsync(gust.OpText, []byte("here: "+strings.Join(members, ", ")), nil)
}

func (l *lobby) OnClose(c *gust.Conn, _ error) {
	if stop, ok := c.Get("stop"); ok {
		stop.(func())()
		name, _ := c.Get("name")
		l.presence.Leave("lobby", name.(string)) // ann's other tabs keep her in
	}
}

// A chat server's presence across instances: every instance runs this on
// its own NATS connection.
func ExampleNewPresence() {
	nc, err := nats.Connect("nats://127.0.0.1:4222", nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	// Heartbeats every second; a killed instance's members leave after 3 s.
	presence, err := gustnats.NewPresence(nc, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer presence.Close() // before nc.Close: the others drop our members at once

	srv := &gust.Server{Upgrader: gust.Upgrader{Handler: &lobby{presence: presence}}}
	log.Fatal(srv.ListenAndServe("127.0.0.1:8080"))
}
