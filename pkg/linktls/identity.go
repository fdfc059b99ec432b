package linktls

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"os"
	"sync"
	"time"
)

// Files names the files of an identity an operator's CA issued (relayctl
// ca issue): the CA's certificate, this process's certificate and key, and
// optionally the CA's revocation list.
type Files struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// CRL, when set, is re-read when it changes (ReloadCRL): a revoked
	// certificate is refused on every link and admin connection.
	CRL string `yaml:"crl,omitempty"`
}

// Set reports whether any file is named.
func (f Files) Set() bool { return f.CA != "" || f.Cert != "" || f.Key != "" || f.CRL != "" }

// Load reads an identity issued by an operator's CA. The certificate must
// chain to the CA, hold the key's public half, name a role, and not be on
// the CRL; the name it carries is the process's (Identity.Name).
func Load(f Files) (*Identity, error) {
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		return nil, errors.New("identity: ca, cert and key are all required (relayctl ca init; relayctl ca issue --name NAME)")
	}
	read := func(what, path string) ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("identity %s: %w", what, err)
		}
		return b, nil
	}
	caPEM, err := read("ca", f.CA)
	if err != nil {
		return nil, err
	}
	certPEMBytes, err := read("cert", f.Cert)
	if err != nil {
		return nil, err
	}
	keyPEMBytes, err := read("key", f.Key)
	if err != nil {
		return nil, err
	}
	caCert, err := parseCertPEM(caPEM)
	if err != nil || !caCert.IsCA {
		return nil, fmt.Errorf("identity ca %s: not a CA certificate (relayctl ca init writes ca.crt): %v", f.CA, err)
	}
	leaf, err := parseCertPEM(certPEMBytes)
	if err != nil {
		return nil, fmt.Errorf("identity cert %s: %w", f.Cert, err)
	}
	if _, err := parseKeyPEM(keyPEMBytes); err != nil {
		return nil, fmt.Errorf("identity key %s: %w", f.Key, err)
	}
	pair, err := tls.X509KeyPair(certPEMBytes, keyPEMBytes)
	if err != nil {
		return nil, fmt.Errorf("identity: cert %s and key %s: %w", f.Cert, f.Key, err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("identity cert %s: not issued by the CA in %s (or expired): %w", f.Cert, f.CA, err)
	}
	p := peerOf(leaf)
	if p.Role != RoleRelay && p.Role != RoleClient {
		return nil, fmt.Errorf("identity cert %s: no known role (%q); issue it with relayctl ca issue", f.Cert, leaf.Subject.OrganizationalUnit)
	}
	pair.Leaf = leaf
	id := &Identity{Name: p.Name, Role: p.Role, roots: roots, caCert: caCert, cert: pair, issued: true,
		crl: &revocations{path: f.CRL, ca: caCert}}
	if f.CRL != "" {
		if _, err := id.ReloadCRL(); err != nil {
			return nil, err
		}
		if id.crl.revoked(leaf) {
			return nil, fmt.Errorf("identity cert %s (%s, serial %x) is revoked by %s: issue a new one", f.Cert, p.Name, leaf.SerialNumber, f.CRL)
		}
	}
	return id, nil
}

// Issued reports whether the identity comes from an operator's CA (Load):
// every peer then holds a key of its own, and route headers are keyed by
// the link, not by a fleet secret.
func (id *Identity) Issued() bool { return id.issued }

// CAPEM is the certificate of the CA this identity verifies peers with.
func (id *Identity) CAPEM() []byte { return certPEM(id.caCert.Raw) }

// ReloadCRL reads the identity's CRL file again when it changed. On an
// error the list in force is kept (a revoked key stays revoked). stale
// reports a list past its NextUpdate, which is still honoured.
func (id *Identity) ReloadCRL() (stale bool, err error) {
	return id.crl.reload(time.Now())
}

// ApplyCRL takes a revocation list (PEM) from elsewhere than the CRL file
// (the registry): one not signed by this identity's CA is refused, and
// what it revokes is added to what is revoked already (no list
// un-revokes). stale reports a list past its NextUpdate.
func (id *Identity) ApplyCRL(b []byte) (stale bool, err error) {
	if !id.issued {
		return false, errors.New("identity: a revocation list needs an identity from an operator CA")
	}
	return id.crl.apply(b, time.Now())
}

// otherFleetHint says what a peer whose certificate does not verify most
// likely is, for the error.
func (id *Identity) otherFleetHint() string {
	if id.issued {
		return "issued by another CA than this identity's, or expired"
	}
	return "a different fleet secret?"
}

// revocations is a CA's revocation list, as last read from path. A nil
// *revocations revokes nothing (a secret-derived identity).
type revocations struct {
	path string
	ca   *x509.Certificate

	mu      sync.Mutex
	raw     []byte
	serials map[string]struct{} // big.Int.Text(16) of each revoked serial
	next    time.Time           // the list's NextUpdate
}

func (r *revocations) revoked(c *x509.Certificate) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.serials[serialKey(c.SerialNumber)]
	return ok
}

func (r *revocations) reload(now time.Time) (bool, error) {
	if r == nil || r.path == "" {
		return false, nil
	}
	b, err := os.ReadFile(r.path)
	if err != nil {
		return false, fmt.Errorf("identity crl: %w (the last list read stays in force)", err)
	}
	stale, err := r.apply(b, now)
	if err != nil {
		return false, fmt.Errorf("identity crl %s: %w", r.path, err)
	}
	return stale, nil
}

// apply adds what the list b (PEM, signed by r.ca) revokes. The newest of
// the lists applied sets whether the list in force is stale.
func (r *revocations) apply(b []byte, now time.Time) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if bytes.Equal(b, r.raw) {
		return now.After(r.next), nil
	}
	crl, err := parseCRL(b, r.ca)
	if err != nil {
		return false, fmt.Errorf("%w (the last list read stays in force)", err)
	}
	serials := map[string]struct{}{}
	for k := range r.serials {
		// A list never un-revokes: a key once revoked stays so even if
		// an older list is put back.
		serials[k] = struct{}{}
	}
	for _, e := range crl.RevokedCertificateEntries {
		serials[serialKey(e.SerialNumber)] = struct{}{}
	}
	r.raw, r.serials = b, serials
	if crl.NextUpdate.After(r.next) {
		r.next = crl.NextUpdate
	}
	return now.After(r.next), nil
}

func serialKey(n *big.Int) string { return n.Text(16) }
