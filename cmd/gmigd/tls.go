package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/mtls"
	"github.com/gmig-dev/gmig/orchestrator"
)

// migrationTLS holds serve's flags for the migration channel: mutual TLS
// unless -insecure-migrations says otherwise (docs/security.md).
type migrationTLS struct {
	cert, key, ca string
	insecure      bool
}

func (m *migrationTLS) register(fs *flag.FlagSet) {
	fs.StringVar(&m.cert, "tls-cert", "", "this host's certificate (PEM) for migrations, both ways: presented to peers, which must trust its CA")
	fs.StringVar(&m.key, "tls-key", "", "the private key of -tls-cert (PEM; keep it 0600)")
	fs.StringVar(&m.ca, "tls-ca", "", "the CA bundle (PEM) a peer's certificate must chain to")
	fs.BoolVar(&m.insecure, "insecure-migrations", false, "migrate over plain TCP: no authentication, no encryption (never on an untrusted network)")
}

// errMigrationTLS is serve's refusal of a migration channel it cannot
// secure.
var errMigrationTLS = errors.New("-migrate-listen needs -tls-cert, -tls-key and -tls-ca (mutual TLS between gmigd; `gmigd certs` makes a test set), or -insecure-migrations")

// transport returns the migration transport the flags ask for. listening
// says whether this gmigd accepts migrations (-migrate-listen); one that
// does not and has no certificates still gets a transport, which refuses
// every outgoing migration with the reason.
func (m *migrationTLS) transport(log zerolog.Logger, listening bool) (orchestrator.Transport, error) {
	some := m.cert != "" || m.key != "" || m.ca != ""
	all := m.cert != "" && m.key != "" && m.ca != ""
	switch {
	case m.insecure && some:
		return nil, errors.New("-insecure-migrations and -tls-cert/-tls-key/-tls-ca exclude each other")
	case some && !all:
		return nil, errors.New("-tls-cert, -tls-key and -tls-ca go together")
	case m.insecure:
		log.Warn().Msg("migrations are neither authenticated nor encrypted (-insecure-migrations): any host that reaches the migration listener can hand this gmigd a VM, and the network sees the vGPUs' memory")
		return orchestrator.TCP{}, nil
	case !all && listening:
		return nil, errMigrationTLS
	case !all:
		return noMigrations{}, nil
	}
	t, err := mtls.Load(mtls.Files{Cert: m.cert, Key: m.key, CA: m.ca}, mtls.Options{Log: log})
	if err != nil {
		return nil, err
	}
	ev := log.Info()
	if time.Until(t.Leaf().NotAfter) < 30*24*time.Hour {
		ev = log.Warn()
	}
	ev.Str("cert", m.cert).Str("subject", t.Leaf().Subject.String()).Strs("dns", t.Leaf().DNSNames).
		Time("not_after", t.Leaf().NotAfter).Str("ca", m.ca).Msg("migrations use mutual TLS")
	return t, nil
}

// noMigrations is the transport of a gmigd given neither certificates nor
// -insecure-migrations: it refuses to migrate.
type noMigrations struct{}

var errNoMigrations = errors.New("gmigd: migrations are off on this host: gmigd serve needs -tls-cert, -tls-key and -tls-ca (or -insecure-migrations)")

func (noMigrations) Dial(context.Context, string) (net.Conn, error) { return nil, errNoMigrations }
func (noMigrations) Listen(string) (net.Listener, error)            { return nil, errNoMigrations }
