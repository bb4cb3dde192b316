package handshake

import (
	"errors"
	"net/http"
	"strings"
)

// Extension is one element of a Sec-WebSocket-Extensions header (RFC 6455
// §9.1): a name and its parameters, in order.
type Extension struct {
	Name   string
	Params []Param
}

// Param is one extension parameter. HasValue tells "p" from "p=" forms;
// quoted-string values are unquoted.
type Param struct {
	Name     string
	Value    string
	HasValue bool
}

var errBadExtensions = errors.New("handshake: malformed Sec-WebSocket-Extensions")

// Extensions parses every Sec-WebSocket-Extensions value in h, in order. It
// returns an error, and the extensions parsed before it, when a value
// breaks the grammar: extension = token *( ";" token [ "=" ( token |
// quoted-string ) ] ), with extensions separated by commas.
func Extensions(h http.Header) ([]Extension, error) {
	var out []Extension
	for _, v := range h.Values("Sec-WebSocket-Extensions") {
		var err error
		out, err = appendExtensions(out, v)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func appendExtensions(out []Extension, s string) ([]Extension, error) {
	p := extParser{s: s}
	for {
		p.skipSpace()
		if p.done() {
			return out, nil
		}
		if p.peek() == ',' { // empty list elements are allowed (RFC 7230 §7)
			p.i++
			continue
		}
		name := p.token()
		if name == "" {
			return out, errBadExtensions
		}
		ext := Extension{Name: name}
		for {
			p.skipSpace()
			if p.done() || p.peek() == ',' {
				break
			}
			if p.peek() != ';' {
				return out, errBadExtensions
			}
			p.i++
			p.skipSpace()
			param := Param{Name: p.token()}
			if param.Name == "" {
				return out, errBadExtensions
			}
			p.skipSpace()
			if !p.done() && p.peek() == '=' {
				p.i++
				p.skipSpace()
				param.HasValue = true
				if !p.done() && p.peek() == '"' {
					v, ok := p.quoted()
					if !ok || !isToken(v) { // RFC 6455 §9.1: the unquoted value must be a token
						return out, errBadExtensions
					}
					param.Value = v
				} else {
					param.Value = p.token()
					if param.Value == "" {
						return out, errBadExtensions
					}
				}
			}
			ext.Params = append(ext.Params, param)
		}
		out = append(out, ext)
	}
}

type extParser struct {
	s string
	i int
}

func (p *extParser) done() bool { return p.i >= len(p.s) }
func (p *extParser) peek() byte { return p.s[p.i] }

func (p *extParser) skipSpace() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *extParser) token() string {
	start := p.i
	for p.i < len(p.s) && tchar[p.s[p.i]] {
		p.i++
	}
	return p.s[start:p.i]
}

// quoted reads a quoted-string with backslash escapes.
func (p *extParser) quoted() (string, bool) {
	p.i++ // opening quote
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '"':
			return b.String(), true
		case c == '\\':
			if p.i >= len(p.s) {
				return "", false
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c < 0x20 && c != '\t', c == 0x7f:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false
}
