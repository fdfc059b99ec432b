package linktls

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// operator is a CA in a temporary directory that issues identities into
// files, as relayctl ca does.
type operator struct {
	t   *testing.T
	dir string
	ca  *CA
}

func newOperator(t *testing.T) *operator {
	t.Helper()
	ca, err := NewCA("test operator", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	o := &operator{t: t, dir: t.TempDir(), ca: ca}
	o.write("ca.crt", ca.CertPEM())
	return o
}

func (o *operator) write(name string, b []byte) string {
	o.t.Helper()
	p := filepath.Join(o.dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		o.t.Fatal(err)
	}
	return p
}

// issue writes name's certificate and key and returns their files.
func (o *operator) issue(name, role string) Files {
	o.t.Helper()
	cert, key, err := o.ca.Issue(name, role, time.Hour)
	if err != nil {
		o.t.Fatal(err)
	}
	return Files{CA: filepath.Join(o.dir, "ca.crt"), Cert: o.write(name+".crt", cert), Key: o.write(name+".key", key)}
}

func (o *operator) load(f Files) *Identity {
	o.t.Helper()
	id, err := Load(f)
	if err != nil {
		o.t.Fatal(err)
	}
	return id
}

func TestIssuedIdentitiesLinkByName(t *testing.T) {
	op := newOperator(t)
	tokyo := op.load(op.issue("tokyo", RoleRelay))
	osaka := op.load(op.issue("osaka", RoleRelay))
	if !tokyo.Issued() || tokyo.Name != "tokyo" || tokyo.Role != RoleRelay {
		t.Fatalf("loaded %+v", tokyo)
	}
	if _, _, cerr, serr := link(t, tokyo, osaka, "osaka"); cerr != nil || serr != nil {
		t.Fatalf("tokyo to osaka: client %v, server %v", cerr, serr)
	}
	// A relay holding its own certificate cannot pass for another: the
	// dialer checks the name before it sends a byte of its own.
	if _, _, cerr, _ := link(t, tokyo, osaka, "singapore"); cerr == nil || !strings.Contains(cerr.Error(), `expected relay "singapore", the peer is relay "osaka"`) {
		t.Errorf("tokyo wanting singapore, reached osaka: %v", cerr)
	}
}

func TestAClientIdentityIsNoRelay(t *testing.T) {
	op := newOperator(t)
	tokyo := op.load(op.issue("tokyo", RoleRelay))
	alice := op.load(op.issue("alice", RoleClient))
	// relayctl connect dials relays with it...
	if _, _, cerr, serr := link(t, alice, tokyo, "tokyo"); cerr != nil || serr != nil {
		t.Fatalf("alice to tokyo: client %v, server %v", cerr, serr)
	}
	// ...but no relay takes it for one, even by its own name.
	if _, _, cerr, _ := link(t, tokyo, alice, "alice"); cerr == nil || !strings.Contains(cerr.Error(), "client") {
		t.Errorf("tokyo dialing a client certificate: %v", cerr)
	}
}

func TestAnotherCAOrTheSecretIsAStranger(t *testing.T) {
	op := newOperator(t)
	other := newOperator(t)
	tokyo := op.load(op.issue("tokyo", RoleRelay))
	impostor := other.load(other.issue("osaka", RoleRelay))
	if _, _, cerr, _ := link(t, tokyo, impostor, "osaka"); cerr == nil || !strings.Contains(cerr.Error(), "not from this fleet") {
		t.Errorf("osaka from another CA: %v", cerr)
	}
	// The fleet secret's CA is another CA too: a secret holder is no member.
	derived := mustNew(t, secret, "osaka", RoleRelay)
	if _, _, cerr, _ := link(t, tokyo, derived, "osaka"); cerr == nil || !strings.Contains(cerr.Error(), "not from this fleet") {
		t.Errorf("osaka from the fleet secret: %v", cerr)
	}
}

func TestRevokedIsRefusedAndStaysRevoked(t *testing.T) {
	op := newOperator(t)
	osakaFiles := op.issue("osaka", RoleRelay)
	osaka := op.load(osakaFiles)
	crlEmpty, err := op.ca.Revoke(nil)
	if err != nil {
		t.Fatal(err)
	}
	tokyoFiles := op.issue("tokyo", RoleRelay)
	tokyoFiles.CRL = op.write("revoked.crl", crlEmpty)
	tokyo := op.load(tokyoFiles)
	if _, _, cerr, _ := link(t, tokyo, osaka, "osaka"); cerr != nil {
		t.Fatalf("before revocation: %v", cerr)
	}
	osakaCert, err := os.ReadFile(osakaFiles.Cert)
	if err != nil {
		t.Fatal(err)
	}
	crl, err := op.ca.Revoke(crlEmpty, osakaCert)
	if err != nil {
		t.Fatal(err)
	}
	op.write("revoked.crl", crl)
	if _, err := tokyo.ReloadCRL(); err != nil {
		t.Fatal(err)
	}
	if _, _, cerr, _ := link(t, tokyo, osaka, "osaka"); cerr == nil || !strings.Contains(cerr.Error(), "revoked") {
		t.Errorf("tokyo dialing revoked osaka: %v", cerr)
	}
	if _, _, _, serr := link(t, osaka, tokyo, "tokyo"); serr == nil || !strings.Contains(serr.Error(), "revoked") {
		t.Errorf("revoked osaka dialing tokyo: server %v", serr)
	}
	// Putting the old list back does not un-revoke; a forged list is refused.
	op.write("revoked.crl", crlEmpty)
	if _, err := tokyo.ReloadCRL(); err != nil {
		t.Fatal(err)
	}
	if _, _, cerr, _ := link(t, tokyo, osaka, "osaka"); cerr == nil {
		t.Error("an older CRL un-revoked osaka")
	}
	forged, err := newOperator(t).ca.Revoke(nil)
	if err != nil {
		t.Fatal(err)
	}
	op.write("revoked.crl", forged)
	if _, err := tokyo.ReloadCRL(); err == nil || !strings.Contains(err.Error(), "not signed by this fleet's CA") {
		t.Errorf("a CRL from another CA: %v", err)
	}
	// A relay does not start on a revoked certificate of its own.
	osakaFiles.CRL = filepath.Join(op.dir, "revoked.crl")
	op.write("revoked.crl", crl)
	if _, err := Load(osakaFiles); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("loading a revoked identity: %v", err)
	}
}

func TestLoadSaysWhatIsWrong(t *testing.T) {
	op := newOperator(t)
	good := op.issue("tokyo", RoleRelay)
	other := newOperator(t).issue("tokyo", RoleRelay)
	for _, tc := range []struct {
		name string
		f    Files
		want string
	}{
		{"missing key", Files{CA: good.CA, Cert: good.Cert}, "ca, cert and key are all required"},
		{"another CA", Files{CA: good.CA, Cert: other.Cert, Key: other.Key}, "not issued by the CA"},
		{"key of another cert", Files{CA: good.CA, Cert: good.Cert, Key: other.Key}, "private key does not match"},
		{"a leaf as CA", Files{CA: good.Cert, Cert: good.Cert, Key: good.Key}, "not a CA certificate"},
		{"no such file", Files{CA: good.CA, Cert: good.Cert + ".nope", Key: good.Key}, "no such file"},
	} {
		if _, err := Load(tc.f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, _, err := op.ca.Issue("no spaces", RoleRelay, time.Hour); err == nil {
		t.Error("issued a certificate for a name with a space")
	}
}

func TestCARoundTrip(t *testing.T) {
	op := newOperator(t)
	key, err := op.ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(op.ca.CertPEM(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, k, err := ca.Issue("tokyo", RoleRelay, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{CA: filepath.Join(op.dir, "ca.crt"), Cert: op.write("t.crt", cert), Key: op.write("t.key", k)}
	op.load(f)
	otherKey, _ := newOperator(t).ca.KeyPEM()
	if _, err := LoadCA(op.ca.CertPEM(), otherKey); err == nil {
		t.Error("LoadCA took another CA's key")
	}
}
