package mtls

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// EnsureCA loads the CA in dir (ca.pem, ca.key), or makes one valid for
// validFor and writes it there if dir has none. dir is made 0700 if need be.
func EnsureCA(dir string, validFor time.Duration) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	certFile, keyFile := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	_, cerr := os.Stat(certFile)
	_, kerr := os.Stat(keyFile)
	switch {
	case cerr == nil && kerr == nil:
		return LoadCA(certFile, keyFile)
	case errors.Is(cerr, os.ErrNotExist) && errors.Is(kerr, os.ErrNotExist):
	default:
		return nil, fmt.Errorf("mtls: %s has one of %s and %s but not both", dir, CACertFile, CAKeyFile)
	}
	ca, err := NewCA("gmig test CA", validFor)
	if err != nil {
		return nil, err
	}
	return ca, ca.Write(dir)
}

// Ensure returns host h's files in dir, making what is missing: the CA
// (once per directory) and h's certificate and key (again when the ones
// there are unreadable, not from this CA, lack one of h's names, or expire
// within a day). Callers in several processes may share dir: a lock file
// there serializes them. This is the cluster harness's: each daemon of a
// cluster gets a certificate from the cluster's one CA.
func Ensure(dir string, h Host) (Files, error) {
	if err := h.check(); err != nil {
		return Files{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, fmt.Errorf("mtls: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return Files{}, err
	}
	defer unlock()
	ca, err := EnsureCA(dir, DefaultValidity)
	if err != nil {
		return Files{}, err
	}
	f := HostFiles(dir, h.Name)
	if hostUsable(ca, f, h) {
		return f, nil
	}
	return ca.WriteHost(dir, h, DefaultValidity)
}

// hostUsable reports whether the host certificate in f is from ca, names
// all of h's names and stays valid for at least a day.
func hostUsable(ca *CA, f Files, h Host) bool {
	if _, err := os.Stat(f.Key); err != nil {
		return false
	}
	cert, err := readCert(f.Cert)
	if err != nil || cert.CheckSignatureFrom(ca.Cert) != nil || time.Until(cert.NotAfter) < 24*time.Hour {
		return false
	}
	dns, ips := h.names()
	for _, d := range dns {
		if !slices.Contains(cert.DNSNames, d) {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, _ := pem.Decode(b)
	if p == nil || p.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("mtls: %s: no certificate", path)
	}
	return x509.ParseCertificate(p.Bytes)
}

// lockDir takes an exclusive lock on dir's lock file until unlock.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("mtls: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("mtls: locking %s: %w", dir, err)
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// writeFile writes data at path with exactly mode (whatever the umask),
// through a temporary file renamed into place, so a reader never sees half
// a file and a key is never readable by others, even for a moment.
func writeFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("mtls: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename: nothing there
	// CreateTemp makes the file 0600; Chmod sets the final mode exactly.
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("mtls: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("mtls: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("mtls: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("mtls: %w", err)
	}
	return nil
}
