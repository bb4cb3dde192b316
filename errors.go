package gust

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
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

// validOnWire reports whether a close frame may carry code (RFC 6455 §7.4):
// 1004–1006 and 1015 are reserved, 1016–2999 unassigned, 3000–4999 belong
// to libraries and applications.
func (s StatusCode) validOnWire() bool {
	return s >= 1000 && s <= 1003 || s >= 1007 && s <= 1014 || s >= 3000 && s <= 4999
}

// CloseError is a connection ended by a closing handshake: the code and
// reason of the peer's close frame, and ByPeer, true when the peer started
// it (false: this side did, with Close or by failing the connection). OnClose
// receives one; read it with errors.As or [CloseStatus].
type CloseError struct {
	Code   StatusCode
	Reason string
	ByPeer bool
}

func (e *CloseError) Error() string {
	s := "gust: closed, the peer answering with "
	if e.ByPeer {
		s = "gust: closed by the peer with "
	}
	s += e.Code.text()
	if e.Reason != "" {
		s += ": " + strconv.Quote(e.Reason)
	}
	return s
}

// text is the code and, when it has one, its name: "1001 GoingAway".
func (s StatusCode) text() string {
	if n, ok := statusNames[s]; ok {
		return strconv.Itoa(int(s)) + " " + n
	}
	return strconv.Itoa(int(s))
}

// ProtocolError reports that gust failed the connection because the peer
// broke the protocol or a limit. Code is the status gust sent: 1002 for a
// protocol error, 1007 for invalid UTF-8 or deflate data, 1009 for a message
// over MaxMessageSize, 1008 for one slower than Options.MessageTimeout (it
// then wraps os.ErrDeadlineExceeded) or in too many empty frames.
type ProtocolError struct {
	Code   StatusCode
	Reason string

	err error // os.ErrDeadlineExceeded for Options.MessageTimeout, else nil
}

// Unwrap returns os.ErrDeadlineExceeded for Options.MessageTimeout, else nil.
func (e *ProtocolError) Unwrap() error { return e.err }

func (e *ProtocolError) Error() string {
	return "gust: " + e.Reason + " (closed with " + e.Code.text() + ")"
}

// PanicError is what OnClose receives after an Event callback panicked and
// gust recovered (unless Options.DisableRecovery is set) and closed with
// 1011: Value is what was passed to panic, Stack where it happened.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("gust: panic in an event handler: %v", e.Value)
}

// HandshakeError is a WebSocket handshake that failed, on either side.
//
// On the server, Upgrade returns one for a request it refused and answered:
// Status (400, 403, 405, 426, ...) and Body, which says why.
// Upgrader.OnRequest returns one to refuse with a response of its own:
// Status (403 when 0), Header and Body go to the client, Err stays on the
// server.
//
// On the client, every error [Dial] returns is one, with the URL. Status,
// Header and Body (its first KiB) are the server's answer, if any: a status
// other than 101 with Err nil is a refusal (a 3xx too, not followed: see
// Header.Get("Location")); 101 (or a 2xx over HTTP/2) with Err set is an
// answer that broke RFC 6455 or RFC 7692. Otherwise Status is 0 and Err the
// cause: bad options or URL, a failed connection, proxy or TLS, or ctx's
// error.
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

// CloseStatus returns the peer's close code when err is or wraps a
// *CloseError, and 0 (never a valid code) otherwise.
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
	// wrapped by Upgrade after an Upgrader's, and passed to OnClose of the
	// connections they cut.
	ErrServerClosed = errors.New("gust: server closed")

	// ErrQueueFull is returned by WriteAsync and WritePreparedAsync when the
	// connection's outbox is full (see Options.OutboxPolicy).
	ErrQueueFull = errors.New("gust: write queue full")

	// ErrSlowConsumer is returned by the write that overflowed an outbox
	// under OutboxCloseSlow, and OnClose receives it for that connection.
	ErrSlowConsumer = errors.New("gust: slow consumer: outbox full, closed with 1008")

	// ErrInvalidCloseCode is returned by Close for a code a close frame may
	// not carry (RFC 6455 §7.4): 1004–1006, 1015, 1016–2999, past 4999.
	ErrInvalidCloseCode = errors.New("gust: close code not valid on the wire")
)

var (
	errControlTooLong = errors.New("gust: control frame payload over 125 bytes")
	errInvalidUTF8    = errors.New("gust: close reason is not valid UTF-8") // RFC 6455 §5.5.1
	errBadOpcode      = errors.New("gust: message opcode must be OpText or OpBinary")
	errClosedNow      = fmt.Errorf("gust: connection closed with CloseNow: %w", net.ErrClosed) // OnClose's after CloseNow
	errClosed         = net.ErrClosed                                                          // writes after the end
	errNilPrepared    = errors.New("gust: nil PreparedMessage")                                // else it fails on the outbox's writer

	errPingOnReader = errors.New("gust: Ping called from an event callback, on the goroutine that reads the connection: " +
		"its pong could never be read; call Ping from another goroutine, or use WritePing and OnPong")
	errStreamOver = errors.New("gust: read of a streamed message after Close or after OnMessage returned")
)

// errTryHTTP1 wraps the errors of handshakeH2 after which Dial redoes the
// handshake over HTTP/1.1 on a new connection.
var errTryHTTP1 = errors.New("gust: no WebSocket over this HTTP/2 server")
