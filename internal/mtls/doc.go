// Package mtls is the migration channel between two gmigd over mutual TLS:
// an orchestrator.Transport whose Dial and Listen return connections that
// have authenticated the peer before anything is read from them, and a
// small certificate authority for tests and demos (gmigd certs, the
// cluster harness).
//
// # The channel
//
// TLS 1.3 only. Each side presents its certificate and verifies the
// other's against the CA bundle it was given: the listening side requires
// a client certificate that chains to the CA and allows client
// authentication (extended key usage clientAuth); the dialling side checks
// that the server's chains to the CA, allows serverAuth and names the
// address it dialled (a DNS or IP subject alternative name). A gmigd is
// both, so its certificate carries both usages. Session tickets are off:
// every connection is a full handshake with the certificate checked then.
//
// The listener handshakes each accepted connection in a goroutine of its
// own, bounded by a handshake timeout, and hands the orchestrator only the
// connections whose handshake succeeded: a peer without a valid certificate
// is refused before a single byte of the migration protocol is read, and a
// stalled handshake holds up nobody else. At most MaxHandshakes handshakes
// run at once; a connection beyond that is closed at once.
//
// Each connection logs the peer's identity once (subject, subject
// alternative names, issuer, serial number, the certificate's SHA-256
// fingerprint): "migration peer authenticated" on success, "migration peer
// refused" with the reason on failure. Nothing secret is ever logged.
//
// Reload reads the certificate, key and CA bundle again (gmigd does on
// SIGHUP): connections made afterwards, through listeners already open
// too, use the new ones; connections already made keep theirs. Unusable
// files fail the reload with Load's checks and leave the old identity in
// place.
//
// # Test certificates
//
// EnsureCA, CA.WriteHost and Ensure make an ECDSA P-256 CA and host
// certificates (both usages, SANs for the host's names plus 127.0.0.1, ::1
// and localhost), as PEM files: keys 0600, certificates 0644. They are for
// tests and demos; production certificates come from the operator's own
// PKI (docs/security.md).
package mtls
