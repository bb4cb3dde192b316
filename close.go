package gust

import (
	"errors"
	"fmt"
	"net"
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

// CloseError is the close frame the peer sent: its code and reason. OnClose
// receives one when the peer closed the connection. Use errors.As or
// [CloseStatus] to read it.
type CloseError struct {
	Code   StatusCode
	Reason string
}

func (e *CloseError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("gust: peer closed with %d %v", uint16(e.Code), e.Code)
	}
	return fmt.Sprintf("gust: peer closed with %d %v: %q", uint16(e.Code), e.Code, e.Reason)
}

// ProtocolError reports that gust failed the connection because the peer
// broke the protocol or a limit. Code is the status gust sent in its close
// frame: 1002 for a protocol error, 1007 for invalid UTF-8, 1009 for a
// message over the size limit.
type ProtocolError struct {
	Code   StatusCode
	Reason string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("gust: %s (closed with %d)", e.Reason, uint16(e.Code))
}

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
	// and passed to OnClose for connections Shutdown had to cut.
	ErrServerClosed = errors.New("gust: server closed")

	// ErrQueueFull is returned by WriteAsync and WritePreparedAsync when the
	// connection's outbox is full (see Options.OutboxPolicy).
	ErrQueueFull = errors.New("gust: write queue full")

	// ErrSlowConsumer is returned by the write that overflowed an outbox
	// under OutboxCloseSlow, and OnClose receives it for that connection.
	ErrSlowConsumer = errors.New("gust: slow consumer: outbox full, closed with 1008")

	// ErrInvalidCloseCode is returned by WriteClose for a code user code may
	// not send: only 1000 and 3000–4999 are allowed, as in the browser API.
	ErrInvalidCloseCode = errors.New("gust: close code must be 1000 or in 3000-4999")

	// ErrControlTooLong is returned for a ping, pong or close payload over
	// 125 bytes.
	ErrControlTooLong = errors.New("gust: control frame payload over 125 bytes")

	// ErrInvalidUTF8 is returned by WriteClose when the reason is not valid
	// UTF-8 (RFC 6455 §5.5.1).
	ErrInvalidUTF8 = errors.New("gust: text is not valid UTF-8")
)

// errBadOpcode is returned when a message write names a control opcode.
var errBadOpcode = errors.New("gust: message opcode must be OpText or OpBinary")

// errClosed is what writes return after the connection closed.
var errClosed = net.ErrClosed
