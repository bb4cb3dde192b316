package servers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gustws/gust"
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
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
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
