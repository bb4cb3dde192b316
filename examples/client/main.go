// Command client is a small interactive WebSocket client, in the manner of
// wscat, written with gust's public API only: it sends each line read from
// standard input as a text message and prints each message it receives.
//
//	go run ./examples/echo &                       # an echo server on ws://127.0.0.1:8080/ws
//	go run ./examples/client                       # type lines, see them echoed
//	go run ./examples/client -url wss://example.com/ws -subprotocol chat.v1 \
//		-compress -H 'Authorization: Bearer t0ken'
//	go run ./examples/client -url wss://127.0.0.1:8443/ws -cacert ca.pem
//
// A wss:// server's certificate is verified against the system's roots, or
// against the CA certificates of -cacert alone (a PEM file: the way to
// trust a self-signed certificate, or a test CA). -insecure skips the
// verification altogether, for a throwaway test server only: anyone on the
// path can then read and change the connection, and the client says so on
// standard error.
//
// Received text messages are printed as "< text", binary ones as
// "< binary: " and their bytes in hex. At the end of standard input (Ctrl-D,
// or the end of a file piped in) the client waits -linger for replies still
// on their way, then closes with 1000 and waits for the server's answer;
// Ctrl-C closes with 1001 at once. It exits with status 0 when the connection ended with a
// close handshake, 1 otherwise.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gustws/gust"
)

// headerFlag collects repeated -H "Name: value" flags.
type headerFlag http.Header

func (h headerFlag) String() string { return "" }

func (h headerFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("%q is not Name: value", s)
	}
	http.Header(h).Add(strings.TrimSpace(name), strings.TrimSpace(value))
	return nil
}

// printer prints what arrives, and reports the end of the connection.
type printer struct {
	gust.BuiltinEventHandler
	mu     sync.Mutex // OnMessage and OnClose may print while main writes to stderr
	out    io.Writer
	closed chan error
}

func (p *printer) OnMessage(_ *gust.Conn, m *gust.Message) {
	defer m.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	if m.Opcode == gust.OpText {
		fmt.Fprintf(p.out, "< %s\n", m.Data)
	} else {
		fmt.Fprintf(p.out, "< binary: %s\n", hex.EncodeToString(m.Data))
	}
}

func (p *printer) OnClose(_ *gust.Conn, err error) { p.closed <- err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// clientTLS returns the TLS configuration -insecure or -cacert asks for,
// nil for the default (the system's roots).
func clientTLS(url string, insecure bool, caCert string) (*tls.Config, error) {
	if !insecure && caCert == "" {
		return nil, nil
	}
	switch {
	case !strings.HasPrefix(url, "wss://"):
		return nil, errors.New("-insecure and -cacert apply to wss:// URLs only")
	case insecure && caCert != "":
		return nil, errors.New("-insecure and -cacert together: -cacert verifies the certificate, -insecure does not")
	case insecure:
		return &tls.Config{InsecureSkipVerify: true}, nil
	}
	pemBytes, err := os.ReadFile(caCert)
	if err != nil {
		return nil, fmt.Errorf("-cacert: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("-cacert: no PEM certificate in %s", caCert)
	}
	return &tls.Config{RootCAs: roots}, nil
}

// run is the client: main with its arguments, streams and signals passed in.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "ws://127.0.0.1:8080/ws", "the ws:// or wss:// URL to connect to")
	subprotocols := fs.String("subprotocol", "", "subprotocols to offer, comma-separated, in order of preference")
	compress := fs.Bool("compress", false, "offer permessage-deflate")
	header := http.Header{}
	fs.Var(headerFlag(header), "H", `a request header, "Name: value" (repeatable)`)
	timeout := fs.Duration("timeout", 10*time.Second, "bound on the handshake")
	linger := fs.Duration("linger", time.Second, "how long to wait for replies after the end of stdin, before closing")
	insecure := fs.Bool("insecure", false, "wss:// only: do not verify the server's certificate (INSECURE: for a test server only)")
	caCert := fs.String("cacert", "", "wss:// only: a PEM `file` of CA certificates to trust, in place of the system's")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "client: unexpected arguments %q; the URL goes in -url\n", fs.Args())
		return 2
	}
	tlsConfig, err := clientTLS(*url, *insecure, *caCert)
	if err != nil {
		fmt.Fprintln(stderr, "client:", err)
		return 2
	}
	if *insecure {
		fmt.Fprintln(stderr, "client: WARNING: -insecure: the server's certificate is NOT verified; "+
			"anyone on the path can read and change this connection")
	}
	opts := &gust.DialOptions{
		Header:    header,
		TLSConfig: tlsConfig,
		Options:   gust.Options{Compression: gust.CompressionOptions{Enabled: *compress}},
	}
	if *subprotocols != "" {
		opts.Subprotocols = strings.Split(*subprotocols, ",")
	}

	p := &printer{out: stdout, closed: make(chan error, 1)}
	dctx, cancel := context.WithTimeout(ctx, *timeout)
	c, _, err := gust.Dial(dctx, *url, p, opts)
	cancel()
	if err != nil {
		fmt.Fprintln(stderr, "client:", err) // a *gust.HandshakeError: status and body when the server refused
		return 1
	}
	p.mu.Lock()
	fmt.Fprintf(stderr, "connected to %s (subprotocol %q, compression %v); Ctrl-D to close\n",
		*url, c.Subprotocol(), c.Compressed())
	p.mu.Unlock()
	go c.ReadLoop()

	// Lines go out as they are read; the reader stops at the end of stdin.
	eof := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if err := c.WriteString(sc.Text()); err != nil {
				eof <- err
				return
			}
		}
		eof <- sc.Err()
	}()

	var end error
	select {
	case end = <-p.closed: // the server closed, or the connection broke
	case err := <-eof:
		if err != nil && !errors.Is(err, net.ErrClosed) {
			fmt.Fprintln(stderr, "client: reading stdin:", err)
		}
		// Messages that arrive after the close frame went out are not
		// delivered: give the replies to the last lines time to come.
		select {
		case end = <-p.closed:
		case <-time.After(*linger):
			c.Close(gust.StatusNormalClosure, "")
			end = <-p.closed
		case <-ctx.Done():
			c.Close(gust.StatusGoingAway, "")
			end = <-p.closed
		}
	case <-ctx.Done():
		c.Close(gust.StatusGoingAway, "")
		end = <-p.closed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(stderr, "closed:", end)
	if gust.CloseStatus(end) == 0 {
		return 1
	}
	return 0
}
