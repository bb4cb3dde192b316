package gust

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"

	"github.com/gustws/gust/internal/selfsigned"
	"github.com/stretchr/testify/require"
)

// testCert makes a self-signed certificate for names (host names or IP
// addresses) and a pool that trusts it.
func testCert(t *testing.T, names ...string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	cert, err := selfsigned.Cert(nil, names...)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	return cert, pool
}

// writeCert writes cert and its key to dir as cert.pem and key.pem, the
// files ListenAndServeTLS and tls.LoadX509KeyPair read.
func writeCert(t *testing.T, dir string, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	certPEM, keyPEM, err := selfsigned.PEM(cert)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))
	return certFile, keyFile
}
