package linktls

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// An operator's CA (docs/security.md, "Identities"): one Ed25519 key kept
// on the operator's machine, never on a relay. It issues each relay a
// certificate naming it (role relay) and each relayctl user one that
// cannot act as a relay (role client), and revokes them with a CRL the
// relays re-read. Unlike the CA derived from a fleet secret, a relay
// holds only its own key: a compromised relay can be itself, never
// another relay, and can mint nothing.

// DefaultCALifetime and DefaultLeafLifetime are how long `relayctl ca
// init` and `relayctl ca issue` make certificates valid by default.
const (
	DefaultCALifetime   = 10 * 365 * 24 * time.Hour
	DefaultLeafLifetime = 365 * 24 * time.Hour
)

// crlLifetime is how long a CRL is valid for after it is made. A relay
// keeps honouring an expired one (a revoked key stays revoked), but warns:
// the operator should make a fresh one (`relayctl ca revoke` with no
// certificate re-signs the list).
const crlLifetime = 30 * 24 * time.Hour

// CA is an operator's certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  ed25519.PrivateKey
}

// NewCA makes a CA called name, valid for lifetime from now.
func NewCA(name string, lifetime time.Duration) (*CA, error) {
	if name == "" {
		name = "relaymesh operator CA"
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("linktls: CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-leafBackdate),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return nil, fmt.Errorf("linktls: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("linktls: CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: priv}, nil
}

// LoadCA reads a CA from its certificate and key (PEM), as NewCA's
// CertPEM and KeyPEM wrote them.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("CA certificate: not a CA certificate")
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if !key.Public().(ed25519.PublicKey).Equal(cert.PublicKey) {
		return nil, errors.New("CA key: it is not the key of the CA certificate")
	}
	return &CA{Cert: cert, Key: key}, nil
}

// CertPEM is the CA's certificate, PEM-encoded: public, every relay and
// relayctl user gets a copy.
func (ca *CA) CertPEM() []byte { return certPEM(ca.Cert.Raw) }

// KeyPEM is the CA's private key (PKCS #8, PEM): the operator's alone.
func (ca *CA) KeyPEM() ([]byte, error) { return keyPEM(ca.Key) }

// Issue makes a certificate and a fresh key for name in role (RoleRelay
// or RoleClient), valid for lifetime from now, both PEM-encoded.
func (ca *CA) Issue(name, role string, lifetime time.Duration) (cert, key []byte, err error) {
	if err := CheckName(name); err != nil {
		return nil, nil, fmt.Errorf("linktls: %w", err)
	}
	if role != RoleRelay && role != RoleClient {
		return nil, nil, fmt.Errorf("linktls: role %q: want %s or %s", role, RoleRelay, RoleClient)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("linktls: key: %w", err)
	}
	der, err := issueLeaf(ca.Cert, ca.Key, pub, name, role, time.Now(), lifetime)
	if err != nil {
		return nil, nil, err
	}
	if key, err = keyPEM(priv); err != nil {
		return nil, nil, err
	}
	return certPEM(der), key, nil
}

// WriteIdentity issues name an identity in role, valid for lifetime, into
// dir as NAME.crt and NAME.key (mode 600), and returns its Files with
// caPath as the CA's certificate: for tools and tests that make a fleet's
// identities in one go (relayctl ca issue never overwrites; this does).
func (ca *CA) WriteIdentity(dir, caPath, name, role string, lifetime time.Duration) (Files, error) {
	cert, key, err := ca.Issue(name, role, lifetime)
	if err != nil {
		return Files{}, err
	}
	f := Files{CA: caPath, Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	if err := os.WriteFile(f.Cert, cert, 0o644); err != nil {
		return Files{}, err
	}
	if err := os.WriteFile(f.Key, key, 0o600); err != nil {
		return Files{}, err
	}
	return f, nil
}

// Flags is f as relayd's command-line flags.
func (f Files) Flags() []string {
	return []string{"--identity-ca", f.CA, "--identity-cert", f.Cert, "--identity-key", f.Key}
}

// Revoke returns a new CRL (PEM) listing what prev (a CRL of this CA,
// PEM; nil for none) lists and the serial numbers of certs (PEM, each
// issued by this CA). With no certs it re-signs prev with a fresh
// validity.
func (ca *CA) Revoke(prev []byte, certs ...[]byte) ([]byte, error) {
	number := big.NewInt(1)
	var entries []x509.RevocationListEntry
	if len(prev) > 0 {
		old, err := parseCRL(prev, ca.Cert)
		if err != nil {
			return nil, err
		}
		entries = old.RevokedCertificateEntries
		number.Add(old.Number, big.NewInt(1))
	}
	now := time.Now()
	for i, c := range certs {
		cert, err := parseCertPEM(c)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", i+1, err)
		}
		if err := cert.CheckSignatureFrom(ca.Cert); err != nil {
			return nil, fmt.Errorf("certificate %d (%s): not issued by this CA: %w", i+1, cert.Subject.CommonName, err)
		}
		if !slices.ContainsFunc(entries, func(e x509.RevocationListEntry) bool { return e.SerialNumber.Cmp(cert.SerialNumber) == 0 }) {
			entries = append(entries, x509.RevocationListEntry{SerialNumber: cert.SerialNumber, RevocationTime: now})
		}
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number:                    number,
		ThisUpdate:                now.Add(-leafBackdate),
		NextUpdate:                now.Add(crlLifetime),
		RevokedCertificateEntries: entries,
	}, ca.Cert, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("linktls: CRL: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), nil
}

// issueLeaf signs a certificate for pub naming name in role.
func issueLeaf(caCert *x509.Certificate, caKey ed25519.PrivateKey, pub ed25519.PublicKey, name, role string, now time.Time, lifetime time.Duration) ([]byte, error) {
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, OrganizationalUnit: []string{role}},
		NotBefore:    now.Add(-leafBackdate),
		NotAfter:     now.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	if hostName.MatchString(name) {
		// For tools that check host names (Prometheus' server_name, curl
		// --cacert with --resolve): the relay's name as a DNS name.
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, pub, caKey)
	if err != nil {
		return nil, fmt.Errorf("linktls: certificate: %w", err)
	}
	return der, nil
}

func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("linktls: serial: %w", err)
	}
	return serial, nil
}

// MaxNameBytes bounds a name an identity carries (and a route header,
// pkg/route): a DNS label's length.
const MaxNameBytes = 63

// CheckName says whether name can be an identity's: 1..MaxNameBytes
// letters, digits, '-', '_' and '.'. Certificates, next-hop URLs and route
// headers all hold names to this one rule.
func CheckName(name string) error {
	if name == "" || len(name) > MaxNameBytes {
		return fmt.Errorf("%q is not a relay name: 1 to %d bytes", name, MaxNameBytes)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%q is not a relay name: letters, digits, '-', '_' and '.' only", name)
		}
	}
	return nil
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyPEM(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("linktls: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseCertPEM reads the one certificate in b.
func parseCertPEM(b []byte) (*x509.Certificate, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return x509.ParseCertificate(blk.Bytes)
}

// parseKeyPEM reads the Ed25519 key (PKCS #8) in b.
func parseKeyPEM(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, errors.New("no PEM PRIVATE KEY block")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T key; relaymesh identities are Ed25519 (relayctl ca issue)", k)
	}
	return ek, nil
}

// parseCRL reads a CRL (PEM) and checks that ca signed it.
func parseCRL(b []byte, ca *x509.Certificate) (*x509.RevocationList, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "X509 CRL" {
		return nil, errors.New("CRL: no PEM X509 CRL block")
	}
	crl, err := x509.ParseRevocationList(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CRL: %w", err)
	}
	if err := crl.CheckSignatureFrom(ca); err != nil {
		return nil, fmt.Errorf("CRL: not signed by this fleet's CA: %w", err)
	}
	return crl, nil
}
