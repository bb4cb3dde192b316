package gust

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// StatusCode is a WebSocket close status code (RFC 6455 §7.4).
type StatusCode uint16

// The close status codes that RFC 6455 §7.4.1 and the IANA registry define.
const (
	StatusNormalClosure           StatusCode = 1000
	StatusGoingAway               StatusCode = 1001
	StatusProtocolError           StatusCode = 1002
	StatusUnsupportedData         StatusCode = 1003
	StatusNoStatusReceived        StatusCode = 1005 // never sent; reported when a close frame has no code
	StatusAbnormalClosure         StatusCode = 1006 // never sent; the connection ended without a close frame
	StatusInvalidFramePayloadData StatusCode = 1007
	StatusPolicyViolation         StatusCode = 1008
	StatusMessageTooBig           StatusCode = 1009
	StatusMandatoryExtension      StatusCode = 1010
	StatusInternalError           StatusCode = 1011
	StatusServiceRestart          StatusCode = 1012
	StatusTryAgainLater           StatusCode = 1013
	StatusBadGateway              StatusCode = 1014
	StatusTLSHandshake            StatusCode = 1015 // never sent
)

var statusNames = map[StatusCode]string{
	StatusNormalClosure:           "NormalClosure",
	StatusGoingAway:               "GoingAway",
	StatusProtocolError:           "ProtocolError",
	StatusUnsupportedData:         "UnsupportedData",
	StatusNoStatusReceived:        "NoStatusReceived",
	StatusAbnormalClosure:         "AbnormalClosure",
	StatusInvalidFramePayloadData: "InvalidFramePayloadData",
	StatusPolicyViolation:         "PolicyViolation",
	StatusMessageTooBig:           "MessageTooBig",
	StatusMandatoryExtension:      "MandatoryExtension",
	StatusInternalError:           "InternalError",
	StatusServiceRestart:          "ServiceRestart",
	StatusTryAgainLater:           "TryAgainLater",
	StatusBadGateway:              "BadGateway",
	StatusTLSHandshake:            "TLSHandshake",
}

// String returns the code's name, such as "NormalClosure", or
// "StatusCode(4000)" for codes without one.
func (s StatusCode) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return "StatusCode(" + strconv.Itoa(int(s)) + ")"
}

// validOnWire reports whether a peer may send code in a close frame
// (RFC 6455 §7.4). 1004–1006 and 1015 are reserved, 1016–2999 unassigned,
// 3000–4999 belong to libraries and applications.
func (s StatusCode) validOnWire() bool {
	switch {
	case s >= 1000 && s <= 1003, s >= 1007 && s <= 1014:
		return true
	case s >= 3000 && s <= 4999:
		return true
	}
	return false
}

// CloseError is how a connection ended with a closing handshake: the code
// and reason of the peer's close frame. ByPeer tells who started it: the
// peer (gust answered with the same code), or this side (with Close, or
// gust failing the connection) and the peer answered. OnClose receives one;
// use errors.As or [CloseStatus] to read it.
type CloseError struct {
	Code   StatusCode
	Reason string
	ByPeer bool
}

func (e *CloseError) Error() string {
	var b strings.Builder
	if e.ByPeer {
		b.WriteString("gust: closed by the peer with ")
	} else {
		b.WriteString("gust: closed, the peer answering with ")
	}
	b.WriteString(e.Code.text())
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(strconv.Quote(e.Reason))
	}
	return b.String()
}

// text is the code and, when it has one, its name: "1001 GoingAway".
func (s StatusCode) text() string {
	if n, ok := statusNames[s]; ok {
		return strconv.Itoa(int(s)) + " " + n
	}
	return strconv.Itoa(int(s))
}

// ProtocolError reports that gust failed the connection because the peer
// broke the protocol or a limit. Code is the status gust sent in its close
// frame: 1002 for a protocol error, 1007 for invalid UTF-8 or deflate data,
// 1009 for a message over the size limit, 1008 for a message that took
// longer than Options.MessageTimeout (errors.Is(err, os.ErrDeadlineExceeded)
// holds then) or came in too many empty frames.
type ProtocolError struct {
	Code   StatusCode
	Reason string

	err error // what it wraps, if anything (os.ErrDeadlineExceeded for Options.MessageTimeout)
}

// Unwrap returns the error e wraps: os.ErrDeadlineExceeded for a message
// that did not arrive within Options.MessageTimeout, else nil.
func (e *ProtocolError) Unwrap() error { return e.err }

func (e *ProtocolError) Error() string {
	return "gust: " + e.Reason + " (closed with " + e.Code.text() + ")"
}

// PanicError reports that an Event callback panicked: gust recovered the
// panic (unless Options.DisableRecovery is set), closed the connection with
// 1011 internal error and passes this to OnClose. Value is what was passed
// to panic, Stack the goroutine's stack where it happened.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("gust: panic in an event handler: %v", e.Value)
}

// HandshakeError is a WebSocket handshake that failed, on either side.
//
// On the server side, Upgrade returns one for a request it refused, after
// answering it: Status is the HTTP status (400, 403 for a refused origin,
// 405, 426 for another WebSocket version, ...) and Body the text of the
// answer, which says why. Upgrader.OnRequest returns one to refuse a
// request with a response of its own: Status (403 when 0), the Header
// fields and the Body are what the client receives; Err is for the server
// alone.
//
// On the client side, every error [Dial] returns is one, with the URL
// dialed. When the server answered, Status is its status code, Header its
// headers and Body the first bytes of its body (up to 1 KiB):
//
//   - Status other than 101, Err nil: the server refused the handshake. A
//     redirect (3xx) is reported this way too: gust does not follow it;
//     the target is in Header.Get("Location").
//   - Status 101, Err set: the server accepted but broke RFC 6455 §4.1 or
//     RFC 7692 doing so (a wrong Sec-WebSocket-Accept, a subprotocol or
//     an extension that was not offered, invalid permessage-deflate
//     parameters). Over HTTP/2 (RFC 8441) a server accepts with a 2xx,
//     not 101: Status is then that 2xx, usually 200.
//
// Otherwise Status is 0 and Err is the cause: invalid options or URL, a
// refused or failed TCP connection, a proxy or TLS failure, ctx's error
// (errors.Is(err, context.DeadlineExceeded) holds when the time ran out).
type HandshakeError struct {
	URL    string // the URL dialed, without credentials; "" on the server side
	Status int
	Header http.Header
	Body   []byte
	Err    error
}

// refusal is a request a server refuses with status, for reason.
func refusal(status int, reason string) *HandshakeError {
	return &HandshakeError{Status: status, Body: []byte(reason)}
}

func (e *HandshakeError) Error() string {
	status := strconv.Itoa(e.Status) + " " + http.StatusText(e.Status)
	if e.URL == "" {
		switch {
		case len(e.Body) > 0:
			return "gust: handshake refused with " + status + ": " + string(e.Body)
		case e.Err != nil:
			return "gust: handshake refused with " + status + ": " + e.Err.Error()
		}
		return "gust: handshake refused with " + status
	}
	prefix := "gust: dial " + e.URL + ": "
	if e.Err != nil {
		if e.Status == http.StatusSwitchingProtocols || e.Status/100 == 2 { // 2xx: accepted over HTTP/2
			return prefix + "bad handshake response: " + e.Err.Error()
		}
		return prefix + e.Err.Error()
	}
	if e.Status >= 300 && e.Status < 400 {
		if loc := e.Header.Get("Location"); loc != "" {
			return fmt.Sprintf("%sanswered with %s; redirect to %q not followed", prefix, status, loc)
		}
	}
	body := e.Body
	if len(body) > 128 {
		body = body[:128]
	}
	if body = bytes.TrimSpace(body); len(body) > 0 {
		return fmt.Sprintf("%srefused with %s: %q", prefix, status, body)
	}
	return prefix + "refused with " + status
}

// Unwrap returns Err.
func (e *HandshakeError) Unwrap() error { return e.Err }

// CloseStatus returns the code of the close frame the peer sent, when err is
// or wraps a *CloseError, and 0 (never a valid code) otherwise.
func CloseStatus(err error) StatusCode {
	var ce *CloseError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return 0
}

// Errors gust returns. Writes on a closed connection return net.ErrClosed.
var (
	// ErrServerClosed is returned by Server.Serve after Shutdown or Close,
	// wrapped by Upgrade after an Upgrader's, and passed to OnClose for
	// the connections Close or Shutdown cut.
	ErrServerClosed = errors.New("gust: server closed")

	// ErrQueueFull is returned by WriteAsync and WritePreparedAsync when the
	// connection's outbox is full (see Options.OutboxPolicy).
	ErrQueueFull = errors.New("gust: write queue full")

	// ErrSlowConsumer is returned by the write that overflowed an outbox
	// under OutboxCloseSlow, and OnClose receives it for that connection.
	ErrSlowConsumer = errors.New("gust: slow consumer: outbox full, closed with 1008")

	// ErrInvalidCloseCode is returned by Close for a code that may not be
	// sent on the wire (RFC 6455 §7.4): 1004–1006, 1015, 1016–2999, and
	// codes past 4999.
	ErrInvalidCloseCode = errors.New("gust: close code not valid on the wire")
)

var (
	// errControlTooLong is returned for a ping, pong or close payload over
	// 125 bytes.
	errControlTooLong = errors.New("gust: control frame payload over 125 bytes")

	// errInvalidUTF8 is returned by Close when the reason is not valid
	// UTF-8 (RFC 6455 §5.5.1).
	errInvalidUTF8 = errors.New("gust: close reason is not valid UTF-8")

	// errBadOpcode is returned when a message write names an opcode other
	// than OpText and OpBinary.
	errBadOpcode = errors.New("gust: message opcode must be OpText or OpBinary")

	// errClosedNow is what OnClose receives after CloseNow.
	errClosedNow = fmt.Errorf("gust: connection closed with CloseNow: %w", net.ErrClosed)

	// errClosed is what writes return after the connection closed.
	errClosed = net.ErrClosed

	// errNilPrepared is returned by WritePreparedAsync for a nil message, which
	// would otherwise fail on the writer goroutine.
	errNilPrepared = errors.New("gust: nil PreparedMessage")

	// errPingOnReader is what Ping returns when called from a goroutine that
	// reads a connection: it would wait for a pong that only it could read.
	errPingOnReader = errors.New("gust: Ping called from an event callback, on the goroutine that reads the connection: " +
		"its pong could never be read; call Ping from another goroutine, or use WritePing and OnPong")

	// errStreamOver is what Read returns on a streamed message after Close or
	// after OnMessage returned: its frames are gone by then.
	errStreamOver = errors.New("gust: read of a streamed message after Close or after OnMessage returned")
)

// errTryHTTP1 is wrapped by the errors of handshakeH2 after which Dial
// redoes the handshake over HTTP/1.1, on a new connection: with
// h2conn.ErrNoExtendedConnect or h2conn.ErrContentLength.
var errTryHTTP1 = errors.New("gust: no WebSocket over this HTTP/2 server")
