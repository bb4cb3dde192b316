package selfsigned

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/stretchr/testify/require"
)

// A self-signed certificate is trusted by a pool that holds it; one that a
// CA signed carries the chain, verifies against the CA for its hosts, and
// round-trips through PEM.
func TestCert(t *testing.T) {
	ca, err := Cert(nil, "test CA")
	require.NoError(t, err)
	require.True(t, ca.Leaf.IsCA)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Leaf)

	leaf, err := Cert(&ca, "127.0.0.1", "localhost")
	require.NoError(t, err)
	require.False(t, leaf.Leaf.IsCA)
	require.Len(t, leaf.Certificate, 2)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool})
		require.NoError(t, err, host)
	}
	_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "example.com", Roots: pool})
	require.Error(t, err)

	certPEM, keyPEM, err := PEM(leaf)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	require.Equal(t, leaf.Certificate, pair.Certificate)
}
