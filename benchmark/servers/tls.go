package servers

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"

	"github.com/gustws/gust"
	"github.com/gustws/gust/internal/selfsigned"
	llibtls "github.com/lesismal/llib/std/crypto/tls"
	"github.com/lesismal/nbio/nbhttp"
	"github.com/lesismal/nbio/nbhttp/websocket"
)

// The TLS servers (wss://, scenario et): gust-tls (goroutine mode), gust-netpoll-tls (netpoll
// mode: crypto/tls on gust's event loops, Server.ServeTLS) and nbio-tls (nbio's engine with its
// own non-blocking fork of crypto/tls). Each serves a self-signed certificate (ECDSA P-256) made
// at start; the load generator does not check it.

func init() {
	register("gust-tls", "github.com/gustws/gust: as gust, over TLS (Server.ServeTLS, crypto/tls), goroutine mode", func(addr string) (Server, error) {
		return startGustTLS(addr, gust.Options{})
	})
	register("gust-netpoll-tls", "github.com/gustws/gust: as gust-netpoll, over TLS (Server.ServeTLS): crypto/tls on the event loops", func(addr string) (Server, error) {
		return startGustTLS(addr, gust.Options{Netpoll: true})
	})
	register("nbio-tls", "github.com/lesismal/nbio: as nbio, over TLS (nbhttp AddrsTLS, llib's non-blocking crypto/tls)", startNbioTLS)
}

// selfSigned returns the PEM of a certificate for 127.0.0.1 and of its key, made once.
var selfSigned = sync.OnceValues(func() (certPEM, keyPEM []byte) {
	cert, err := selfsigned.Cert(nil, "127.0.0.1")
	if err == nil {
		certPEM, keyPEM, err = selfsigned.PEM(cert)
	}
	if err != nil {
		panic(err)
	}
	return certPEM, keyPEM
})

func startGustTLS(addr string, opts gust.Options) (Server, error) {
	cert, err := tls.X509KeyPair(selfSigned())
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	opts.MaxMessageSize = MaxMessage
	srv := &gust.Server{
		Upgrader:  gust.Upgrader{Handler: gustEcho{}, Options: opts},
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
	}
	go srv.ServeTLS(ln, "", "")
	return gustServer{srv: srv, addr: ln.Addr().String()}, nil
}

func startNbioTLS(addr string) (Server, error) {
	cert, err := llibtls.X509KeyPair(selfSigned())
	if err != nil {
		return nil, err
	}
	up := websocket.NewUpgrader()
	up.MessageLengthLimit = MaxMessage
	up.OnMessage(func(c *websocket.Conn, mt websocket.MessageType, data []byte) {
		_ = c.WriteMessage(mt, data) // nbio closes the connection on a write error
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_, _ = up.Upgrade(w, r, nil)
	})
	return runNbio(nbhttp.Config{
		AddrsTLS:  []string{addr},
		TLSConfig: &llibtls.Config{Certificates: []llibtls.Certificate{cert}},
		Handler:   mux,
	})
}
