package qemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// QEMU's RAM stream over TLS (docs/security.md): each end of a migration
// gets a tls-creds-x509 object made from gmigd's own certificate, key and
// CA bundle (the PKI of the vGPU's stream), added over QMP just before the
// migration, and migrate-set-parameters names it as tls-creds. The source
// is the TLS client and checks that the destination's certificate chains
// to the CA and names tls-hostname; the destination is the server and,
// with verify-peer, refuses a source without a certificate from the CA.
// Without TLS both ends set tls-creds to "" (plain), so a QEMU that
// migrated with TLS before does not look for an object that is gone.

// TLSCredsID is the QOM id of the credentials object gmigd adds to a QEMU
// for its migration.
const TLSCredsID = "gmig-migration-tls"

// The file names a tls-creds-x509 object reads from its directory
// (QEMU's docs/system/tls.rst, "Certificate file naming").
const (
	tlsCAFile = "ca-cert.pem"
	// endpoint "server": the destination; "client": the source.
	tlsServerCert, tlsServerKey = "server-cert.pem", "server-key.pem"
	tlsClientCert, tlsClientKey = "client-cert.pem", "client-key.pem"
)

// ErrTLS is credentials QEMU could not be given or refused.
var ErrTLS = errors.New("qemu: migration TLS credentials")

// TLS is the identity a QEMU's migration stream authenticates and
// encrypts with.
type TLS struct {
	Cert []byte // this host's certificate, then any intermediates (PEM)
	Key  []byte // its private key (PEM, PKCS#8 or PKCS#1: what gnutls reads)
	CA   []byte // the CA bundle the peer's certificate must chain to (PEM)
	// Hostname is the name the destination's certificate must carry (a
	// DNS or IP subject alternative name); the source's only. "" is the
	// migration URI's host.
	Hostname string
	// Dir is where the files are written for QEMU to read, in a
	// directory of their own (0700, keys 0600, owned by QEMU's user)
	// removed once QEMU has loaded them. It must be a directory QEMU
	// sees at the same path (gmigd's run directory).
	Dir string
}

// setTLS prepares vm's migration stream for endpoint ("client" at the
// source, "server" at the destination): with t, a fresh credentials
// object from t named in tls-creds; without, tls-creds "" (plain).
func (vm *VM) setTLS(endpoint string, t *TLS) error {
	if t == nil {
		params := map[string]any{"tls-creds": ""}
		if endpoint == "client" {
			params["tls-hostname"] = ""
		}
		_, err := vm.QMP("migrate-set-parameters", params)
		return err
	}
	if err := vm.addTLSCreds(endpoint, t); err != nil {
		return err
	}
	params := map[string]any{"tls-creds": TLSCredsID}
	if endpoint == "client" {
		params["tls-hostname"] = t.Hostname
	}
	_, err := vm.QMP("migrate-set-parameters", params)
	return err
}

// addTLSCreds replaces vm's credentials object (one from an earlier
// migration may have the other endpoint) with one loaded from t's files.
func (vm *VM) addTLSCreds(endpoint string, t *TLS) error {
	if err := vm.delTLSCreds(); err != nil {
		return err
	}
	dir, err := writeTLSFiles(endpoint, t, vm.pid)
	if err != nil {
		return err
	}
	// QEMU reads the files when the object is made (its complete step):
	// they need not outlive the object-add.
	defer os.RemoveAll(dir)
	_, err = vm.QMP("object-add", map[string]any{
		"qom-type": "tls-creds-x509", "id": TLSCredsID, "dir": dir,
		"endpoint": endpoint, "verify-peer": true,
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTLS, err)
	}
	return nil
}

// delTLSCreds removes vm's credentials object if it has one.
func (vm *VM) delTLSCreds() error {
	raw, err := vm.QMP("qom-list", map[string]string{"path": "/objects"})
	if err != nil {
		return err
	}
	var props []qomProperty
	if err := json.Unmarshal(raw, &props); err != nil {
		return fmt.Errorf("qemu: qom-list /objects: %w", err)
	}
	if !slices.ContainsFunc(props, func(p qomProperty) bool { return p.Name == TLSCredsID }) {
		return nil
	}
	_, err = vm.QMP("object-del", map[string]string{"id": TLSCredsID})
	return err
}

// qomProperty is one entry of qom-list's answer (QMP's ObjectPropertyInfo).
type qomProperty struct {
	Name string `json:"name"`
}

// writeTLSFiles writes t as endpoint's files in a new directory under
// t.Dir, owned by the user QEMU (process pid) runs as.
func writeTLSFiles(endpoint string, t *TLS, pid int) (string, error) {
	if len(t.Cert) == 0 || len(t.Key) == 0 || len(t.CA) == 0 {
		return "", fmt.Errorf("%w: want a certificate, a key and a CA bundle", ErrTLS)
	}
	if t.Dir == "" {
		return "", fmt.Errorf("%w: no directory to write them in", ErrTLS)
	}
	certName, keyName := tlsClientCert, tlsClientKey
	if endpoint == "server" {
		certName, keyName = tlsServerCert, tlsServerKey
	}
	fi, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	if err != nil {
		return "", fmt.Errorf("%w: QEMU's process: %w", ErrTLS, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	dir, err := os.MkdirTemp(t.Dir, "qemu-tls-") // 0700
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrTLS, err)
	}
	files := []struct {
		name string
		data []byte
	}{{tlsCAFile, t.CA}, {certName, t.Cert}, {keyName, t.Key}}
	for _, f := range files {
		// New files: 0600 or less, whatever the umask.
		err = os.WriteFile(filepath.Join(dir, f.name), f.data, 0o600)
		if err == nil {
			err = os.Chown(filepath.Join(dir, f.name), int(st.Uid), int(st.Gid))
		}
		if err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("%w: %w", ErrTLS, err)
		}
	}
	if err := os.Chown(dir, int(st.Uid), int(st.Gid)); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("%w: %w", ErrTLS, err)
	}
	return dir, nil
}
