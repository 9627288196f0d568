package hostd

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/internal/mtls"
	"github.com/gmig-dev/gmig/orchestrator"
)

// QEMU's own RAM stream is encrypted and authenticated with the
// certificates of the vGPU's stream (docs/security.md): a transport that
// can hand out its identity as PEM (internal/mtls's, which gmigd serve
// makes from -tls-cert, -tls-key and -tls-ca) gives it to both QEMUs of
// every migration, read at that migration's start, so a reload (SIGHUP)
// reaches QEMU too. Any other transport (-insecure-migrations, tests'
// plain TCP) leaves QEMU's stream plain.

// pemIdentity is a transport that can give QEMU its identity
// (mtls.Transport).
type pemIdentity interface {
	PEM() (mtls.PEM, error)
}

// qemuTLS is the identity of a QEMU's migration stream, nil for plain
// TCP; hostname is the name the destination's certificate must carry (the
// source's; "" at the destination).
func (h *Host) qemuTLS(hostname string) (*qemu.TLS, error) {
	t, ok := h.cfg.Transport.(pemIdentity)
	if !ok {
		return nil, nil
	}
	p, err := t.PEM()
	if err != nil {
		return nil, fmt.Errorf("hostd: the certificates for QEMU's migration stream: %w", err)
	}
	return &qemu.TLS{Cert: p.Cert, Key: p.Key, CA: p.CA, Hostname: hostname, Dir: h.cfg.RunDir}, nil
}

// outgoingVM is the orchestrator's view of r at a migration's source
// towards peer (host:port): a QEMU's RAM stream goes over TLS checked
// against peer's host, the name the vGPU's stream checked too.
func (h *Host) outgoingVM(r *vmRec, peer string, opts MigrateOptions) (orchestrator.SourceVM, string, json.RawMessage, error) {
	vm, kind, spec, err := r.sourceVM(opts)
	if err != nil {
		return nil, "", nil, err
	}
	o, ok := vm.(*qemu.Outgoing)
	if !ok {
		return vm, kind, spec, nil
	}
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		return nil, "", nil, fmt.Errorf("hostd: peer %q: %w", peer, err)
	}
	if o.TLS, err = h.qemuTLS(host); err != nil {
		return nil, "", nil, err
	}
	if via := os.Getenv(RAMViaEnv); via != "" {
		return &ramVia{Outgoing: o, via: via, log: h.log.With().Str("vm", r.name).Logger()}, kind, spec, nil
	}
	return o, kind, spec, nil
}

// RAMViaEnv names a test hook: set (host:port) in a source gmigd's
// environment, QEMU's RAM stream goes there instead of to the destination
// QEMU's address, which the source logs ("destination ready", incoming),
// so that a test can put a relay in the middle. The names checked stay the
// destination's.
const RAMViaEnv = "GMIG_TEST_RAM_VIA"

// ramVia is a source QEMU under the RAMViaEnv hook.
type ramVia struct {
	*qemu.Outgoing
	via string
	log zerolog.Logger
}

func (v *ramVia) Migrate(ctx context.Context, target string) error {
	v.log.Warn().Str("incoming", target).Str("via", v.via).Msg("QEMU's RAM stream goes through " + RAMViaEnv + " (a test hook)")
	return v.Outgoing.Migrate(ctx, "tcp:"+v.via)
}
