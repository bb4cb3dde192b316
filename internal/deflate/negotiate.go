// Package deflate is permessage-deflate (RFC 7692): the negotiation of its
// parameters in the handshake, and a connection's compression state, which
// compresses what it sends and inflates what it receives.
package deflate

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/klauspost/compress/flate"

	"github.com/gustws/gust/internal/handshake"
)

// The bounds of a window, as a power of two (RFC 7692 §7.1.2), and the
// defaults Config.WithDefaults fills in.
const (
	MinWindowBits    = 8
	MaxWindowBits    = 15
	DefaultThreshold = 512
	defaultLevel     = flate.BestSpeed
)

// Config is one side's compression settings, its fields named as RFC 7692
// names the parameters, from the server's and the client's sides: what the
// negotiation speaks. The root's CompressionOptions maps onto it.
type Config struct {
	Enabled                 bool
	Level                   int // flate level of the messages this side sends
	Threshold               int // messages below it go out uncompressed
	ServerNoContextTakeover bool
	ClientNoContextTakeover bool
	ServerMaxWindowBits     int
	ClientMaxWindowBits     int
}

// WithDefaults returns c with the defaults in place of values out of
// range: level 1, a threshold of 512 bytes, windows of 15 bits.
func (c Config) WithDefaults() Config {
	if c.Level < flate.BestSpeed || c.Level > flate.BestCompression {
		c.Level = defaultLevel
	}
	if c.Threshold <= 0 {
		c.Threshold = DefaultThreshold
	}
	c.ServerMaxWindowBits = windowBitsOrDefault(c.ServerMaxWindowBits)
	c.ClientMaxWindowBits = windowBitsOrDefault(c.ClientMaxWindowBits)
	return c
}

func windowBitsOrDefault(b int) int {
	if b < MinWindowBits || b > MaxWindowBits {
		return MaxWindowBits
	}
	return b
}

// Params are the negotiated permessage-deflate parameters.
type Params struct {
	ServerNoContextTakeover bool
	ClientNoContextTakeover bool
	ServerMaxWindowBits     int // 8–15
	ClientMaxWindowBits     int // 8–15
	serverBitsInResponse    bool
	clientBitsInResponse    bool
}

// String renders the parameters as a Sec-WebSocket-Extensions value: the
// server's answer to the offer Negotiate accepted.
func (p Params) String() string {
	var b strings.Builder
	b.WriteString("permessage-deflate")
	if p.ServerNoContextTakeover {
		b.WriteString("; server_no_context_takeover")
	}
	if p.ClientNoContextTakeover {
		b.WriteString("; client_no_context_takeover")
	}
	if p.serverBitsInResponse {
		b.WriteString("; server_max_window_bits=")
		b.WriteString(strconv.Itoa(p.ServerMaxWindowBits))
	}
	if p.clientBitsInResponse {
		b.WriteString("; client_max_window_bits=")
		b.WriteString(strconv.Itoa(p.ClientMaxWindowBits))
	}
	return b.String()
}

// parseWindowBits reads a window-bits value: a decimal 8–15 without a
// leading zero (RFC 7692 §7.1.2).
func parseWindowBits(v string) (int, bool) {
	if len(v) == 0 || len(v) > 2 || v[0] == '0' {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < MinWindowBits || n > MaxWindowBits {
		return 0, false
	}
	return n, true
}

// Negotiate picks the first permessage-deflate offer the server, configured
// by c, can accept (RFC 7692 §5, §7.1). An offer with an unknown or
// repeated parameter, or an invalid value, is declined; the caller declines
// compression altogether for a malformed header, without failing the
// handshake.
func Negotiate(offers []handshake.Extension, c *Config) (Params, bool) {
	for _, ext := range offers {
		if !strings.EqualFold(ext.Name, "permessage-deflate") {
			continue
		}
		p := Params{ServerMaxWindowBits: MaxWindowBits, ClientMaxWindowBits: MaxWindowBits}
		serverBitsOffered, clientBitsOffered := false, false
		ok := true
		seen := map[string]bool{}
		for _, param := range ext.Params {
			name := strings.ToLower(param.Name)
			if seen[name] {
				ok = false
				break
			}
			seen[name] = true
			switch name {
			case "server_no_context_takeover":
				ok = !param.HasValue
				p.ServerNoContextTakeover = true
			case "client_no_context_takeover":
				ok = !param.HasValue
				p.ClientNoContextTakeover = true
			case "server_max_window_bits":
				serverBitsOffered = true
				p.ServerMaxWindowBits, ok = parseWindowBits(param.Value)
			case "client_max_window_bits":
				clientBitsOffered = true
				if param.HasValue {
					p.ClientMaxWindowBits, ok = parseWindowBits(param.Value)
				}
			default:
				ok = false
			}
			if !ok {
				break
			}
		}
		if !ok {
			continue
		}
		p.ServerNoContextTakeover = p.ServerNoContextTakeover || c.ServerNoContextTakeover
		p.ClientNoContextTakeover = p.ClientNoContextTakeover || c.ClientNoContextTakeover
		p.ServerMaxWindowBits = min(p.ServerMaxWindowBits, c.ServerMaxWindowBits)
		// An offer of server_max_window_bits is accepted by answering it,
		// with the same value or a smaller one, even 15 (RFC 7692
		// §7.1.2.1); without an offer, the answer is needed only for a
		// window smaller than the 15 the client assumes.
		p.serverBitsInResponse = serverBitsOffered || p.ServerMaxWindowBits < MaxWindowBits
		if clientBitsOffered {
			p.ClientMaxWindowBits = min(p.ClientMaxWindowBits, c.ClientMaxWindowBits)
			p.clientBitsInResponse = p.ClientMaxWindowBits < MaxWindowBits
		}
		return p, true
	}
	return Params{}, false
}

// Offer is the client's permessage-deflate offer. It always includes
// client_max_window_bits, so that the server may bound the window the
// client compresses with and keep a smaller one for reading.
func Offer(c *Config) string {
	b := []byte("permessage-deflate")
	if c.ServerNoContextTakeover {
		b = append(b, "; server_no_context_takeover"...)
	}
	if c.ClientNoContextTakeover {
		b = append(b, "; client_no_context_takeover"...)
	}
	if c.ServerMaxWindowBits < MaxWindowBits {
		b = append(b, "; server_max_window_bits="...)
		b = strconv.AppendInt(b, int64(c.ServerMaxWindowBits), 10)
	}
	b = append(b, "; client_max_window_bits"...)
	if c.ClientMaxWindowBits < MaxWindowBits {
		b = append(b, '=')
		b = strconv.AppendInt(b, int64(c.ClientMaxWindowBits), 10)
	}
	return string(b)
}

// Accept checks the server's answer, the Sec-WebSocket-Extensions of its
// response h, to the offer Offer made (RFC 7692 §5, §7.1), and returns the
// parameters to use, or nil when the server declined compression. Anything
// the offer does not allow fails the handshake, with an error that says
// what, quoting the header: an extension not offered, an unknown or
// repeated parameter, a window larger than the one asked for, a parameter
// the server had to echo and did not.
func Accept(h http.Header, c *Config) (*Params, error) {
	exts, err := handshake.Extensions(h)
	if err != nil {
		return nil, fmt.Errorf("malformed Sec-WebSocket-Extensions %q", h.Values("Sec-WebSocket-Extensions"))
	}
	if len(exts) == 0 {
		return nil, nil
	}
	ext := exts[0]
	if !c.Enabled || !strings.EqualFold(ext.Name, "permessage-deflate") {
		return nil, fmt.Errorf("the server selected extension %q, which was not offered", ext.Name)
	}
	if len(exts) > 1 {
		return nil, fmt.Errorf("the server selected more extensions than offered: %q", h.Values("Sec-WebSocket-Extensions"))
	}
	p := &Params{ServerMaxWindowBits: MaxWindowBits, ClientMaxWindowBits: c.ClientMaxWindowBits}
	seen := make(map[string]bool, len(ext.Params))
	serverBits := false
	for _, param := range ext.Params {
		name := strings.ToLower(param.Name)
		if seen[name] {
			return nil, fmt.Errorf("permessage-deflate parameter %s repeated", name)
		}
		seen[name] = true
		switch name {
		case "server_no_context_takeover", "client_no_context_takeover":
			if param.HasValue {
				return nil, fmt.Errorf("permessage-deflate parameter %s takes no value", name)
			}
			if name == "server_no_context_takeover" {
				p.ServerNoContextTakeover = true
			} else {
				p.ClientNoContextTakeover = true
			}
		case "server_max_window_bits", "client_max_window_bits":
			bits, ok := parseWindowBits(param.Value)
			if !ok {
				return nil, fmt.Errorf("permessage-deflate parameter %s=%q is not a window size from 8 to 15", name, param.Value)
			}
			if name == "server_max_window_bits" {
				if bits > c.ServerMaxWindowBits {
					return nil, fmt.Errorf("server_max_window_bits=%d is over the %d offered", bits, c.ServerMaxWindowBits)
				}
				p.ServerMaxWindowBits, serverBits = bits, true
			} else {
				if bits > c.ClientMaxWindowBits {
					return nil, fmt.Errorf("client_max_window_bits=%d is over the %d offered", bits, c.ClientMaxWindowBits)
				}
				p.ClientMaxWindowBits = bits
			}
		default:
			return nil, fmt.Errorf("unknown permessage-deflate parameter %q", param.Name)
		}
	}
	if c.ServerNoContextTakeover && !p.ServerNoContextTakeover {
		return nil, fmt.Errorf("the server accepted permessage-deflate without the server_no_context_takeover offered")
	}
	if c.ServerMaxWindowBits < MaxWindowBits && !serverBits {
		return nil, fmt.Errorf("the server accepted permessage-deflate without the server_max_window_bits offered")
	}
	// Dropping context is always allowed to the sender (RFC 7692 §7.1.1.2).
	p.ClientNoContextTakeover = p.ClientNoContextTakeover || c.ClientNoContextTakeover
	return p, nil
}
