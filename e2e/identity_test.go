package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/registry/consultest"
)

// opCA is an operator CA made with relayctl ca, as an operator would.
type opCA struct {
	t   *testing.T
	dir string
}

func newOpCA(t *testing.T) *opCA {
	t.Helper()
	ca := &opCA{t: t, dir: filepath.Join(t.TempDir(), "ca")}
	ca.relayctl("ca", "init", "--dir", ca.dir)
	return ca
}

func (ca *opCA) relayctl(args ...string) string {
	ca.t.Helper()
	out, err := exec.Command(relayctlBin, args...).CombinedOutput()
	if err != nil {
		ca.t.Fatalf("relayctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// issue makes name's identity (role relay or client) in a directory of its
// own, as it would be copied to the relay, and returns relayd's flags for it.
func (ca *opCA) issue(name, role string) []string {
	ca.t.Helper()
	out := filepath.Join(ca.dir, "..", name)
	ca.relayctl("ca", "issue", "--dir", ca.dir, "--name", name, "--role", role, "--out", out)
	return []string{"--identity-ca", filepath.Join(out, "ca.crt"), "--identity-cert", filepath.Join(out, name+".crt"), "--identity-key", filepath.Join(out, name+".key")}
}

func (ca *opCA) certPath(name string) string {
	return filepath.Join(ca.dir, "..", name, name+".crt")
}

// identityRelay starts relay name with its identity and a relay listener.
func (ca *opCA) identityRelay(name string, extra ...string) *nativeRelay {
	ca.t.Helper()
	addr := freeAddr(ca.t)
	args := append(append([]string{"--allow-private", "--relay-listen", addr, "--name", name}, ca.issue(name, "relay")...), extra...)
	return &nativeRelay{relayd: startRelayd(ca.t, args...), relayAddr: addr, args: args}
}

func namedHop(name, addr string) string { return "relaymesh://" + addr + "?name=" + name }

// TestIdentityChain: a fleet with identities from an operator CA and no
// fleet secret anywhere carries a 3-relay native chain, warm pools and all.
func TestIdentityChain(t *testing.T) {
	ca := newOpCA(t)
	c := ca.identityRelay("c")
	b := ca.identityRelay("b")
	a := ca.identityRelay("a", "--next", namedHop("b", b.relayAddr), "--next", namedHop("c", c.relayAddr))
	srv := startServer(t, echo)
	for i := range 3 {
		echoOnce(t, a.socks, srv.addr(), fmt.Sprintf("identity-%d", i))
		time.Sleep(50 * time.Millisecond) // let the pools refill
	}
	if hits := metricValue(t, a.relayd, `relaymesh_pool_events_total{event="hit"}`); hits < 1 {
		t.Errorf("entry: %v warm pool hits, want >= 1", hits)
	}
}

// TestRedTeamIdentityImpersonation: a compromised relay holds a valid
// certificate of its own and sits where the registry (or a static next
// hop) says another relay is. It cannot pass for that relay: the entry
// refuses it at the TLS handshake, as a middle relay does for the hop after
// it, before a route header is sent; nothing reaches the destination.
func TestRedTeamIdentityImpersonation(t *testing.T) {
	ca := newOpCA(t)
	evil := ca.identityRelay("evil")
	srv := startServer(t, echo)
	t.Run("first hop", func(t *testing.T) {
		a := ca.identityRelay("a", "--next", namedHop("b", evil.relayAddr))
		if _, _, err := xnetDial(t, a.socks, srv.addr(), nil); err == nil {
			t.Fatal("the chain through the impostor came up")
		}
		if !logsSay(a.relayd, `expected relay \"b\", the peer is relay \"evil\"`) {
			t.Errorf("the entry did not refuse the impostor by name:\n%s", a.logs())
		}
	})
	t.Run("later hop", func(t *testing.T) {
		b := ca.identityRelay("b")
		a := ca.identityRelay("a2", "--next", namedHop("b", b.relayAddr), "--next", namedHop("c", evil.relayAddr))
		if _, _, err := xnetDial(t, a.socks, srv.addr(), nil); err == nil {
			t.Fatal("the chain through the impostor came up")
		}
		if !logsSay(b.relayd, `expected relay \"c\", the peer is relay \"evil\"`) {
			t.Errorf("the middle relay did not refuse the impostor by name:\n%s", b.logs())
		}
	})
	if n := srv.conn.get(); n != 0 {
		t.Errorf("the destination saw %d connections", n)
	}
	if strings.Contains(evil.logs(), `"dst"`) {
		t.Errorf("the impostor received a route header:\n%s", evil.logs())
	}
	t.Run("no name", func(t *testing.T) {
		// With identities, a relaymesh:// hop that names no relay is a
		// config error: no link is made to whoever answers.
		out, err := exec.Command(relaydBin, append([]string{"run", "--relay-listen", freeAddr(t), "--next", "relaymesh://" + evil.relayAddr}, ca.issue("d", "relay")...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "names the relay it expects there") {
			t.Errorf("relayd with an unnamed hop: %v\n%s", err, out)
		}
	})
}

// TestRedTeamIdentityClientIsNoRelay: a relayctl user's certificate opens
// route headers (relayctl connect), but neither runs a relay listener nor
// is taken for a relay by one that dials it.
func TestRedTeamIdentityClientIsNoRelay(t *testing.T) {
	ca := newOpCA(t)
	alice := ca.issue("alice", "client")
	out, err := exec.Command(relaydBin, append([]string{"run", "--admin", "", "--relay-listen", freeAddr(t)}, alice...)...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "client certificate; a relay listener needs one issued with --role relay") {
		t.Errorf("relayd with a client certificate and a relay listener: %v\n%s", err, out)
	}
	// A server holding alice's certificate, where relay "alice" is meant.
	id, err := linktls.Load(linktls.Files{CA: alice[1], Cert: alice[3], Key: alice[5]})
	if err != nil {
		t.Fatal(err)
	}
	fake := startServer(t, func(c net.Conn) {
		if tc, err := id.Server(context.Background(), c); err == nil {
			_, _ = io.Copy(io.Discard, tc)
		}
	})
	a := ca.identityRelay("a", "--next", namedHop("alice", fake.addr()))
	if _, _, err := xnetDial(t, a.socks, startServer(t, echo).addr(), nil); err == nil {
		t.Fatal("a relay took a client certificate for a relay")
	}
	if !logsSay(a.relayd, `the peer is client \"alice\"`) {
		t.Errorf("not refused for its role:\n%s", a.logs())
	}
}

// TestRedTeamIdentityAdmin: with identities, relays and relayctl users
// reach admin APIs with their certificates; no relay holds a token that
// opens another relay, and a compromised relay planted at another relay's
// admin address (a wrong fleet file or registry entry) receives no request
// at all: whom the connection reaches is checked before anything is sent.
func TestRedTeamIdentityAdmin(t *testing.T) {
	ca := newOpCA(t)
	dir := t.TempDir()
	fleetPath := filepath.Join(dir, "fleet.yaml")
	a := &fleetRelay{name: "a", admin: freeAddr(t)}
	b := &fleetRelay{name: "b", admin: freeAddr(t)}

	// The impostor: an HTTPS server with evil's own, valid certificate.
	evilFlags := ca.issue("evil", "relay")
	evilID, err := linktls.Load(linktls.Files{CA: evilFlags[1], Cert: evilFlags[3], Key: evilFlags[5]})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	impostor := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" auth="+r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"pairs":[]}`)
	}))
	impostor.TLS = evilID.AdminServerConfig()
	impostor.Config.ErrorLog = log.New(io.Discard, "", 0)
	impostor.StartTLS()
	defer impostor.Close()
	c := &fleetRelay{name: "c", admin: impostor.Listener.Addr().String()}

	// No admin_token in the fleet file: every relay has its own.
	writeFleetFile(t, fleetPath, "", []*fleetRelay{a, b, c})
	for i, fr := range []*fleetRelay{a, b} {
		cfg := filepath.Join(dir, fr.name+".yaml")
		body := fmt.Sprintf("probe: {interval: 200ms, window: 10, timeout: 1s, pull_interval: 300ms}\nfleet: %s\n", fleetPath)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"--config", cfg, "--name", fr.name, "--admin", fr.admin, "--admin-token", fmt.Sprintf("own-token-of-relay-%d-0123456789", i), "--allow-private"},
			ca.issue(fr.name, "relay")...)
		fr.r = startRelayd(t, args...)
	}
	// relayctl with a user's certificate reads the matrix: a and b pulled
	// each other's measurements with their certificates.
	alice := ca.issue("alice", "client")
	deadline := time.Now().Add(15 * time.Second)
	for {
		cmd := exec.Command(relayctlBin, "rtt", "--fleet", fleetPath, "--output", "json", "--identity-cert", alice[3])
		out, err := cmd.Output()
		if err == nil && strings.Contains(string(out), `"from": "a"`) && strings.Contains(string(out), `"from": "b"`) &&
			strings.Contains(string(out), `"to": "a"`) && strings.Contains(string(out), `"to": "b"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relayctl rtt with a client certificate did not show a<->b: %v\n%s\n%s", err, out, a.r.logs())
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(time.Second) // more pulls toward the impostor
	mu.Lock()
	defer mu.Unlock()
	if len(seen) > 0 {
		t.Fatalf("the impostor at c's admin address received %d requests: %q", len(seen), seen)
	}
	// A relay's own token does not open another relay.
	req, _ := http.NewRequest(http.MethodGet, "http://"+b.admin+"/v1/info", nil)
	req.Header.Set("Authorization", "Bearer own-token-of-relay-0-0123456789")
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 5 * time.Second}
	req.URL.Scheme = "https"
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("b answered a's token with %s, want 401", resp.Status)
	}
}

// TestRedTeamIdentityRevoked: the operator revokes a relay; the others
// re-read the list and refuse it on new and pooled links.
func TestRedTeamIdentityRevoked(t *testing.T) {
	ca := newOpCA(t)
	ca.relayctl("ca", "revoke", "--dir", ca.dir) // an empty list to start with
	crl := filepath.Join(t.TempDir(), "revoked.crl")
	copyFile(t, filepath.Join(ca.dir, "revoked.crl"), crl)
	b := ca.identityRelay("b")
	a := ca.identityRelay("a", "--next", namedHop("b", b.relayAddr), "--identity-crl", crl)
	srv := startServer(t, echo)
	echoOnce(t, a.socks, srv.addr(), "before")
	ca.relayctl("ca", "revoke", "--dir", ca.dir, ca.certPath("b"))
	copyFile(t, filepath.Join(ca.dir, "revoked.crl"), crl)
	waitRevoked(t, a, srv)
}

// waitRevoked waits up to 15 s (the list is re-read every 10 s) for the
// entry a to stop carrying tunnels to srv, and checks it says why.
func waitRevoked(t *testing.T, a *nativeRelay, srv *server) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		c, _, err := xnetDial(t, a.socks, srv.addr(), nil)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the revoked relay still carries tunnels 15 s after the list was out")
		}
	}
	if !logsSay(a.relayd, "revoked") {
		t.Errorf("the refusal does not say revoked:\n%s", a.logs())
	}
}

// logsSay waits up to 2 s for r's log to contain s (a failure reaches the
// client before the relay's log line does).
func logsSay(r *relayd, s string) bool {
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if strings.Contains(r.logs(), s) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// TestRedTeamIdentityRevokedThroughConsul: relays on a Consul registry
// take the revocation list the operator publishes there (relayctl ca
// revoke --consul) and refuse the revoked relay; a list not signed by the
// fleet's CA, written by a Consul writer, revokes nothing.
func TestRedTeamIdentityRevokedThroughConsul(t *testing.T) {
	agent := consultest.Start(t, "../bin/consul")
	ca := newOpCA(t)
	consul := []string{"--consul", agent.HTTP}
	b := ca.identityRelay("b", consul...)
	a := ca.identityRelay("a", append([]string{"--next", namedHop("b", b.relayAddr)}, consul...)...)
	srv := startServer(t, echo)
	echoOnce(t, a.socks, srv.addr(), "before")

	// A Consul writer's own list naming b, signed by a CA of its own:
	// refused.
	writeForgedCRL(t, agent.HTTP, ca.certPath("b"))
	time.Sleep(12 * time.Second) // a re-read
	echoOnce(t, a.socks, srv.addr(), "after a forged list")
	if !logsSay(a.relayd, "not signed by this fleet's CA") {
		t.Errorf("the forged list was not refused as such:\n%s", a.logs())
	}

	ca.relayctl("ca", "revoke", "--dir", ca.dir, "--consul", agent.HTTP, ca.certPath("b"))
	waitRevoked(t, a, srv)
}

// writeForgedCRL publishes in Consul a revocation list naming the
// certificate at certPath, signed by a CA that is not the fleet's.
func writeForgedCRL(t *testing.T, consulAddr, certPath string) {
	t.Helper()
	b, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	other, err := linktls.NewCA("a Consul writer's CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: big.NewInt(99), ThisUpdate: time.Now().Add(-time.Hour), NextUpdate: time.Now().Add(time.Hour),
		RevokedCertificateEntries: []x509.RevocationListEntry{{SerialNumber: cert.SerialNumber, RevocationTime: time.Now()}},
	}, other.Cert, other.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := registry.PublishCRL(context.Background(), consulAddr, "", pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der})); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	// Written whole, then renamed: a relay never reads half a list.
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}
