// Package keepalive is the arithmetic of a connection's heartbeat, in
// ticks: at each check it says when to check again, and whether a peer
// silent for the ping interval is due a ping, or one still silent the ping
// timeout after it is due to be cut. It sends nothing and keeps no time:
// the caller counts the ticks, says since when the peer has been silent,
// and acts on the answer.
package keepalive

// State is what a connection's checks remember between them: the tick a
// ping went out at for the current silence. Its zero value is no ping.
type State struct {
	pinged uint64 // 0: none
}

// Action is what a check found due.
type Action uint8

const (
	Wait Action = iota // nothing until the next check
	Ping               // silent for the interval: send a ping
	Cut                // still silent the timeout after the ping: end the connection
)

// Check checks a connection at tick t: silent since tick seen, unless
// alive. One silent for interval is due a ping, one still silent timeout
// after it is cut. It returns the tick of the next check and the action.
func (s *State) Check(t, seen uint64, alive bool, interval, timeout uint64) (due uint64, a Action) {
	switch {
	case alive:
		s.pinged = 0
		return t + interval, Wait
	case s.pinged != 0 && seen < s.pinged:
		// Nothing arrived since the ping: the wait began before it.
		if t-s.pinged >= timeout {
			return t + interval, Cut
		}
		// The pong may be late rather than lost (a busy process): look
		// again within the interval, so that once it comes the next ping
		// is not put off until the timeout.
		return min(s.pinged+timeout, t+interval), Wait
	case t-seen > interval:
		// The wait began at tick seen or up to a tick later: a ping only
		// once the silence has surely lasted the interval. Look again
		// within the interval, not only at the timeout: once the pong has
		// come, the next ping is due the interval after it.
		s.pinged = t
		return t + min(interval, timeout), Ping
	default:
		s.pinged = 0
		return seen + interval + 1, Wait
	}
}
