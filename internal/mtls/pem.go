package mtls

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
)

// PEM is a host's identity as PEM: what another program that speaks TLS
// for this host is given (QEMU, for its own migration stream).
type PEM struct {
	Cert []byte // the certificate, then any intermediates, as presented
	Key  []byte // its private key, PKCS#8 ("PRIVATE KEY")
	CA   []byte // the CA bundle, as read
}

// ErrNoPEM is a Transport made by New: its CA bundle was never PEM.
var ErrNoPEM = errors.New("mtls: this transport's CA bundle was not read from a file (made by New)")

// PEM returns the identity Load or the last Reload read, the one Dial and
// the listeners present now. The key is re-encoded as PKCS#8 whatever
// form its file had (PKCS#1, SEC 1 or PKCS#8), a form every TLS library
// reads.
func (t *Transport) PEM() (PEM, error) {
	id := t.cur.Load()
	if id.bundle == nil {
		return PEM{}, ErrNoPEM
	}
	cert := id.server.Certificates[0]
	var chain bytes.Buffer
	for _, der := range cert.Certificate {
		chain.Write(pemBlock("CERTIFICATE", der))
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return PEM{}, fmt.Errorf("mtls: encoding the key as PKCS#8: %w", err)
	}
	return PEM{Cert: chain.Bytes(), Key: pemBlock("PRIVATE KEY", key), CA: bytes.Clone(id.bundle)}, nil
}
