package main

import (
	"context"
	"crypto/x509"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/mtls"
	"github.com/gmig-dev/gmig/internal/sdnotify"
	"github.com/gmig-dev/gmig/orchestrator"
)

// reloader returns what SIGHUP reloads for transport t: the migration
// certificates when t is mutual TLS (the files of -tls-cert, -tls-key and
// -tls-ca, read again), else nil.
func (m *migrationTLS) reloader(t orchestrator.Transport) func() (*x509.Certificate, error) {
	mt, ok := t.(*mtls.Transport)
	if !ok {
		return nil
	}
	files := mtls.Files{Cert: m.cert, Key: m.key, CA: m.ca}
	return func() (*x509.Certificate, error) {
		if err := mt.Reload(files); err != nil {
			return nil, err
		}
		return mt.Leaf(), nil
	}
}

// watchHUP handles SIGHUP until ctx ends: each one is logged and reloads
// the migration certificates through reload (nil: nothing to reload),
// between RELOADING=1 and READY=1 to systemd. New migration connections
// use the new certificates; a reload that fails keeps the old ones and
// logs why.
func watchHUP(ctx context.Context, log zerolog.Logger, reload func() (*x509.Certificate, error)) error {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	defer signal.Stop(ch)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
		}
		if reload == nil {
			log.Info().Str("signal", "SIGHUP").Msg("nothing to reload: migrations do not use mutual TLS")
			continue
		}
		notify(log, sdnotify.ReloadingNow())
		leaf, err := reload()
		if err != nil {
			log.Error().Str("signal", "SIGHUP").Err(err).Msg("certificates not reloaded: migrations keep the previous ones")
		} else {
			log.Info().Str("signal", "SIGHUP").Str("subject", leaf.Subject.String()).Str("serial", leaf.SerialNumber.Text(16)).
				Time("not_after", leaf.NotAfter).Msg("certificates reloaded: new migration connections use them")
		}
		notify(log, sdnotify.Ready)
	}
}

// notify tells systemd state (sdnotify.Notify); a failure is logged, not
// fatal: the daemon serves either way.
func notify(log zerolog.Logger, state string) {
	if _, err := sdnotify.Notify(state); err != nil {
		log.Warn().Err(err).Msg("systemd notification failed")
	}
}
