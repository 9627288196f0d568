package mtls

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// File names in a certificate directory (gmigd certs -out DIR).
const (
	CACertFile = "ca.pem"
	CAKeyFile  = "ca.key"
	lockFile   = ".lock"
)

// DefaultValidity is how long EnsureCA's and WriteHost's certificates are
// valid by default.
const DefaultValidity = 365 * 24 * time.Hour

// backdate moves NotBefore an hour into the past, so a peer whose clock is
// a little behind accepts a certificate made a moment ago.
const backdate = time.Hour

// LocalSANs are in every host certificate made here: the cluster harness
// and the tests reach daemons on loopback.
var LocalSANs = []string{"127.0.0.1", "::1", "localhost"}

// ErrHost is an unusable host specification.
var ErrHost = errors.New("mtls: bad host")

// Host names one host certificate: Name is its subject's common name and
// its files' base name (NAME.pem, NAME.key); SANs are the names and
// addresses peers reach it at (Name itself and LocalSANs are added).
type Host struct {
	Name string
	SANs []string
}

// hostNameRE is what a host's Name may be: it becomes a file name.
var hostNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ParseHosts reads a comma-separated list of hosts, each NAME or
// NAME=SAN+SAN... (a SAN is a DNS name or an IP address): "a,b" or
// "a=10.0.0.11,b=10.0.0.12+b.example".
func ParseHosts(s string) ([]Host, error) {
	var hosts []Host
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		name, sans, withSANs := strings.Cut(f, "=")
		h := Host{Name: name}
		if withSANs {
			h.SANs = strings.Split(sans, "+")
		}
		if err := h.check(); err != nil {
			return nil, err
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%w: no host in %q", ErrHost, s)
	}
	return hosts, nil
}

func (h Host) check() error {
	if !hostNameRE.MatchString(h.Name) {
		return fmt.Errorf("%w: name %q (want 1-63 of A-Z a-z 0-9 . _ -)", ErrHost, h.Name)
	}
	for _, s := range h.SANs {
		if s == "" || strings.ContainsAny(s, " /\\,=+") {
			return fmt.Errorf("%w: %s's name %q", ErrHost, h.Name, s)
		}
	}
	return nil
}

// names returns h's DNS names and IP addresses: Name, SANs, LocalSANs.
func (h Host) names() (dns []string, ips []net.IP) {
	for _, s := range slices.Concat([]string{h.Name}, h.SANs, LocalSANs) {
		if ip := net.ParseIP(s); ip != nil {
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		} else if !slices.Contains(dns, s) {
			dns = append(dns, s)
		}
	}
	return dns, ips
}

// Files names the three PEM files one gmigd needs: its certificate, its
// private key and the CA bundle its peers' certificates must chain to.
type Files struct {
	Cert, Key, CA string
}

// HostFiles returns the files of host name in directory dir.
func HostFiles(dir, name string) Files {
	return Files{
		Cert: filepath.Join(dir, name+".pem"),
		Key:  filepath.Join(dir, name+".key"),
		CA:   filepath.Join(dir, CACertFile),
	}
}
