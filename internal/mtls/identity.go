package mtls

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"

	"github.com/rs/zerolog"
)

// logPeer adds c's peer identity to e: its address and its certificate's
// subject, subject alternative names, issuer, serial number and SHA-256
// fingerprint. All of it is public (it crossed the wire in the clear part
// of the handshake or is derived from what did); no key material.
func logPeer(e *zerolog.Event, c *tls.Conn) *zerolog.Event {
	e = e.Str("peer", c.RemoteAddr().String())
	st := c.ConnectionState()
	if len(st.PeerCertificates) == 0 {
		return e
	}
	return certFields(e, "peer", st.PeerCertificates[0])
}

// logRefused adds to e what a refused peer claimed to be, when the
// refusal was of its certificate: the same fields as logPeer's, prefixed
// "claimed" (not verified: anyone can claim a name).
func logRefused(e *zerolog.Event, err error) *zerolog.Event {
	var verr *tls.CertificateVerificationError
	if errors.As(err, &verr) && len(verr.UnverifiedCertificates) > 0 {
		e = certFields(e, "claimed", verr.UnverifiedCertificates[0])
	}
	return e.Err(err)
}

func certFields(e *zerolog.Event, prefix string, cert *x509.Certificate) *zerolog.Event {
	ips := make([]string, len(cert.IPAddresses))
	for i, ip := range cert.IPAddresses {
		ips[i] = ip.String()
	}
	sum := sha256.Sum256(cert.Raw)
	return e.Str(prefix+"_subject", cert.Subject.String()).
		Strs(prefix+"_dns", cert.DNSNames).
		Strs(prefix+"_ips", ips).
		Str(prefix+"_issuer", cert.Issuer.String()).
		Str(prefix+"_serial", cert.SerialNumber.Text(16)).
		Str(prefix+"_sha256", hex.EncodeToString(sum[:]))
}
