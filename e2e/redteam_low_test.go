package e2e

// The low findings of the red-team review (docs/security.md, "Low
// findings"), each against real relayd processes.

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/route"
	"github.com/relaymesh/relaymesh/pkg/testenv"
)

// httpForward sends an absolute-form GET for url through the HTTP proxy
// at proxyAddr and returns the status.
func httpForward(t *testing.T, proxyAddr, url string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", url)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestRedTeamDenyPort25: a relay refuses destination port 25 by default
// (policy.deny_ports), on every front end: SOCKS5, HTTP CONNECT, an
// absolute-form GET, a route header's destination,
// and as the entry of a chain whose next hop would let it through. An
// open relay to port 25 is a spammer's mail relay; there used to be no
// port policy at all.
func TestRedTeamDenyPort25(t *testing.T) {
	const host = "127.0.0.25" // port 25 on an address of its own: a local MTA keeps 127.0.0.1:25
	ln, err := net.Listen("tcp", host+":25")
	if err != nil {
		testenv.Need(t, "cannot listen on %s:25 (%v): binding port 25 needs root", host, err)
	}
	ln.Close()
	canary := startServerAt(t, host+":25", func(net.Conn) {})
	dst := canary.addr()

	secretFile := writeSecret(t, fleetSecret)
	relayAddr := freeAddr(t)
	r := startRelayd(t, "--allow-private", "--relay-listen", relayAddr, "--fleet-secret-file", secretFile)
	// A relay that lets port 25 through, and an entry that chains
	// through it: the entry's own policy refuses before any hop.
	openCfg := filepath.Join(t.TempDir(), "open.yaml")
	if err := os.WriteFile(openCfg, []byte("policy: {deny_ports: []}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := startRelayd(t, "--config", openCfg, "--allow-private")
	entry := startRelayd(t, "--allow-private", "--next", "socks5://"+open.socks)

	for _, socks := range []string{r.socks, entry.socks} {
		if rep, err := socksRaw(t, socks, connectReq(host, 25)); err != nil || rep != 0x02 {
			t.Errorf("SOCKS5 CONNECT %s:25: reply 0x%02x (%v), want 0x02 (not allowed)", host, rep, err)
		}
	}
	if code := httpConnect(t, r.http, dst); code != http.StatusForbidden {
		t.Errorf("HTTP CONNECT %s: %d, want 403", dst, code)
	}
	// A service name for the port: Go's server refuses it (400) before
	// relayd's policy (403) would.
	if code := httpConnect(t, r.http, host+":smtp"); code != http.StatusForbidden && code != http.StatusBadRequest {
		t.Errorf("HTTP CONNECT %s:smtp: %d, want 400 or 403", host, code)
	}
	if code := httpForward(t, r.http, "http://"+dst+"/"); code != http.StatusForbidden {
		t.Errorf("GET http://%s/: %d, want 403", dst, code)
	}
	req, err := route.NewRequest(nil, dst, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := rawRelay(t, relayAddr, false, []byte(fleetSecret), req, nil)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := route.ReadResponse(c, []byte(fleetSecret), req.Nonce)
	c.Close()
	if err != nil || resp.Status != route.StatusDenied {
		t.Errorf("route header to %s: %+v, %v; want denied", dst, resp, err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := canary.conn.get(); n != 0 {
		t.Fatalf("port 25 saw %d connections through the relays", n)
	}
	// deny_ports: [] opens it: the canary does answer.
	if rep, err := socksRaw(t, open.socks, connectReq(host, 25)); err != nil || rep != 0x00 {
		t.Fatalf("deny_ports [] : reply 0x%02x (%v), want 0x00", rep, err)
	}
}

// TestRedTeamTrafficBounds: the admin API's traffic source and sink bound
// what a token holder can make the relay do: no /sha256/N (a pass over up
// to 16 GiB of CPU per request, running on after the client left), an
// upload declaring more than 16 GiB refused at once, and a transfer that
// stalls (an upload that sends nothing, a download nobody reads) cut
// within the stall bound, so eight of them no longer hold every place.
func TestRedTeamTrafficBounds(t *testing.T) {
	const token = "e2e-token-0123456789"
	r := startRelayd(t, "--admin-token", token, "--drain-timeout", "1s")
	do := func(method, path string, timeout time.Duration) (*http.Response, error) {
		req, _ := http.NewRequest(method, "http://"+r.admin+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return (&http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	}
	resp, err := do(http.MethodGet, "/v1/traffic/sha256/17179869184", 3*time.Second)
	if err != nil {
		t.Fatalf("/sha256 of 16 GiB: %v (want 404 at once)", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/sha256 of 16 GiB: %s, want 404", resp.Status)
	}

	// rawUpload starts an upload declaring n bytes and sends 10 of them.
	rawUpload := func(n int64) (net.Conn, *bufio.Reader) {
		c, err := net.DialTimeout("tcp", r.admin, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "POST /v1/traffic/upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n0123456789", token, n)
		return c, bufio.NewReader(c)
	}
	c, br := rawUpload(17 << 30)
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("an upload declaring 17 GiB: %v %v, want 413 at once", resp, err)
	}

	// Eight stalled transfers: four uploads that send nothing more, four
	// 16 GiB downloads nobody reads.
	for range 4 {
		rawUpload(1 << 20)
	}
	for i := range 4 {
		resp, err := do(http.MethodGet, "/v1/traffic/bytes/17179869184", 0)
		if err != nil {
			t.Fatalf("download %d: %v", i, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
	}
	time.Sleep(300 * time.Millisecond)
	resp, err = do(http.MethodGet, "/v1/traffic/bytes/1024", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a ninth transfer beside eight: %s, want 503 (the test holds them wrong)", resp.Status)
	}
	// The stall bound is 1 s (--drain-timeout); a download's socket
	// buffers take a moment to fill before its writes block.
	deadline := time.Now().Add(8 * time.Second)
	for {
		resp, err := do(http.MethodGet, "/v1/traffic/bytes/1024", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("8 s after eight stalled transfers began, a new one is still refused: %s", resp.Status)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestRedTeamAdminTokenFile: the admin token can come from a file
// (--admin-token-file), so that ps, which shows every process's command
// line to every user of the host, does not show it; and a config file
// that holds a secret itself and that other users may read is warned
// about at start. The token used to be a flag or a key of the config
// file, and the config file's mode went unchecked.
func TestRedTeamAdminTokenFile(t *testing.T) {
	const token = "e2e-token-from-a-file-0123"
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRelayd(t, "--admin-token-file", tokenFile)
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", r.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cmdline), token) {
		t.Fatalf("the admin token is on relayd's command line: %q", cmdline)
	}
	for _, tc := range []struct {
		bearer string
		want   int
	}{{"", http.StatusUnauthorized}, {"wrong-token-0123456789", http.StatusUnauthorized}, {token, http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+r.admin+"/v1/info", nil)
		if tc.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+tc.bearer)
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("/v1/info with token %q: %s, want %d", tc.bearer, resp.Status, tc.want)
		}
	}

	// A config file holding the token, readable by everyone.
	cfg := filepath.Join(dir, "relayd.yaml")
	if err := os.WriteFile(cfg, []byte("admin_token: "+token+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	r2 := startRelayd(t, "--config", cfg)
	if log := r2.logs(); !strings.Contains(log, "secret file exposed: config file (it sets a secret) "+cfg) || !strings.Contains(log, "chmod 600 "+cfg) {
		t.Fatalf("no warning about the 0644 config file holding the admin token:\n%s", log)
	}
	if strings.Contains(r2.logs(), token) {
		t.Fatal("the log shows the admin token")
	}
}

// TestRedTeamAuthGuessLimit: a source that fails to authenticate
// limits.max_auth_failures times (SOCKS5 and HTTP together) is refused
// for limits.auth_block, even with the right password (a right guess must
// not tell), while other sources are served; the refusals are counted
// apart (reason auth_blocked). A stranger could guess passwords as fast
// as the relay answered.
func TestRedTeamAuthGuessLimit(t *testing.T) {
	ip := nonLoopbackAddr(t)
	cfg := filepath.Join(t.TempDir(), "relayd.yaml")
	if err := os.WriteFile(cfg, []byte("limits: {max_auth_failures: 5, auth_block: 3s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRelayd(t, "--config", cfg, "--allow-private", "--user", frontUser, "--password", frontPass,
		"--socks", "0.0.0.0:0", "--http", "0.0.0.0:0")
	_, socksPort, _ := net.SplitHostPort(r.socks)
	_, httpPort, _ := net.SplitHostPort(r.http)
	socksAt, httpAt := net.JoinHostPort(ip, socksPort), net.JoinHostPort(ip, httpPort)
	httpAuth := func(addr, pass string) int {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic %s\r\n\r\n", "127.0.0.1:1", basicAuth(frontUser, pass))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}
	for i := range 3 {
		if rep, err := socksAuthRaw(socksAt, frontUser, fmt.Sprintf("guess-%d", i)); err != nil || rep == 0 {
			t.Fatalf("SOCKS5 guess %d: status %d, %v", i, rep, err)
		}
	}
	for i := range 2 {
		if code := httpAuth(httpAt, fmt.Sprintf("guess-%d", i)); code != http.StatusProxyAuthRequired {
			t.Fatalf("HTTP guess %d: %d, want 407", i, code)
		}
	}
	// Five failures: the right password is refused now, on both.
	if rep, err := socksAuthRaw(socksAt, frontUser, frontPass); err != nil || rep == 0 {
		t.Fatalf("the right password after 5 failed guesses from %s: status %d (%v), want refused", ip, rep, err)
	}
	if code := httpAuth(httpAt, frontPass); code != http.StatusTooManyRequests {
		t.Fatalf("HTTP with the right password after 5 failed guesses: %d, want 429", code)
	}
	// Another source (loopback, exempt anyway) is served.
	if rep, err := socksAuthRaw(r.socks, frontUser, frontPass); err != nil || rep != 0 {
		t.Fatalf("loopback with the right password: status %d, %v", rep, err)
	}
	if v := metricValue(t, r, `relaymesh_denials_total{reason="auth_blocked"}`); v != 2 {
		t.Fatalf("auth_blocked denials = %v, want 2", v)
	}
	if !strings.Contains(r.logs(), "source blocked: too many failed authentications") {
		t.Fatal("the block is not logged")
	}
	time.Sleep(3 * time.Second) // auth_block after the last failure
	if rep, err := socksAuthRaw(socksAt, frontUser, frontPass); err != nil || rep != 0 {
		t.Fatalf("the right password once auth_block passed: status %d, %v", rep, err)
	}
}

// TestRedTeamPlanNameDenied completes TestRedTeamPlanSurveyDenied, whose
// destination is an IP literal (refused before anything is planned): here
// it is a name, "localhost", that passes the literal check and resolves to
// a denied address (loopback, where the relays are but clients' tunnels
// may not go). A relay routing by plan must refuse it on both front ends,
// and neither its survey (this relay's own timing of the destination, the
// other relay's /v1/probe) nor the tunnel may connect to it: a canary on
// both loopback addresses of the port sees nothing.
func TestRedTeamPlanNameDenied(t *testing.T) {
	var canaries []*server
	for range 20 {
		c4 := startServerAt(t, "127.0.0.1:0", func(net.Conn) {})
		port := c4.ln.Addr().(*net.TCPAddr).Port
		ln, err := net.Listen("tcp", fmt.Sprintf("[::1]:%d", port))
		if err != nil {
			continue // taken on ::1: another port
		}
		ln.Close()
		canaries = []*server{c4, startServerAt(t, fmt.Sprintf("[::1]:%d", port), func(net.Conn) {})}
		break
	}
	if canaries == nil {
		testenv.Need(t, "no port free on both 127.0.0.1 and ::1")
	}
	port := canaries[0].ln.Addr().(*net.TCPAddr).Port
	relays := startPlanFleet(t)
	dst := net.JoinHostPort("localhost", strconv.Itoa(port))
	// Twice: the first asks while the survey runs, the second is planned
	// on its outcome.
	for i := range 2 {
		if rep, err := socksRaw(t, relays[0].r.socks, connectReq("localhost", port)); err != nil || rep != 0x02 {
			t.Errorf("SOCKS5 CONNECT %s (%d) through a relay routing by plan: reply 0x%02x (%v), want 0x02 (not allowed)", dst, i, rep, err)
		}
		if code := httpConnect(t, relays[0].r.http, dst); code != http.StatusForbidden {
			t.Errorf("HTTP CONNECT %s (%d): %d, want 403", dst, i, code)
		}
		time.Sleep(time.Second) // a survey in flight connects by now
	}
	for _, c := range canaries {
		if n := c.conn.get(); n != 0 {
			t.Fatalf("%s, a denied destination, saw %d connections through the relays", c.addr(), n)
		}
	}
}
