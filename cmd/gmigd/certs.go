package main

import (
	"fmt"
	"time"

	"github.com/gmig-dev/gmig/internal/mtls"
)

const certsUsage = `usage: gmigd certs -out DIR -hosts NAME[=SAN+SAN...],...

For tests and demos: makes a CA in DIR (ca.pem, ca.key; one already there
is reused) and, for each host, a certificate and key signed by it (NAME.pem,
NAME.key): ECDSA P-256, valid to serve and to dial migrations, with subject
alternative names for NAME, the names and addresses after = and 127.0.0.1,
::1, localhost. Keys are 0600, certificates 0644. Each host needs its own
NAME.pem and NAME.key and ca.pem:

  gmigd serve -migrate-listen ADDR -tls-cert DIR/NAME.pem -tls-key DIR/NAME.key -tls-ca DIR/ca.pem

ca.key stays where it was made. Production certificates come from your own
PKI (docs/security.md).`

func cmdCerts(args []string) error {
	fs := newFlagSet("certs", certsUsage)
	out := fs.String("out", "", "directory for the CA and the hosts' files (required; made 0700)")
	hosts := fs.String("hosts", "", "comma-separated hosts: NAME or NAME=SAN+SAN (a SAN is a DNS name or an IP address; required)")
	days := fs.Int("days", 365, "validity of new certificates in days")
	if _, err := parseN(fs, args); err != nil {
		return err
	}
	if *out == "" || *hosts == "" {
		return badUsage(fs, "want -out DIR and -hosts")
	}
	if *days < 1 {
		return badUsage(fs, "-days %d: want at least 1", *days)
	}
	hs, err := mtls.ParseHosts(*hosts)
	if err != nil {
		return err
	}
	validFor := time.Duration(*days) * 24 * time.Hour
	ca, err := mtls.EnsureCA(*out, validFor)
	if err != nil {
		return err
	}
	fmt.Printf("CA %q valid until %s: %s/%s (give to every host), %s/%s (keep here)\n",
		ca.Cert.Subject.CommonName, ca.Cert.NotAfter.Format(time.DateOnly), *out, mtls.CACertFile, *out, mtls.CAKeyFile)
	for _, h := range hs {
		f, err := ca.WriteHost(*out, h, validFor)
		if err != nil {
			return err
		}
		fmt.Printf("host %s: -tls-cert %s -tls-key %s -tls-ca %s\n", h.Name, f.Cert, f.Key, f.CA)
	}
	return nil
}
