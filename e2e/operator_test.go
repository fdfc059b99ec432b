package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/testenv"
)

// relaydExit runs relayd with args to its end (at most 15 s) and returns
// its stderr, whether it exited 0, and how long it took.
func relaydExit(t *testing.T, args ...string) (stderr string, ok bool, took time.Duration) {
	t.Helper()
	return relaydExitWrapped(t, nil, args...)
}

// relaydExitWrapped is relaydExit with relayd run under wrap (e.g. setpriv
// ... --).
func relaydExitWrapped(t *testing.T, wrap []string, args ...string) (stderr string, ok bool, took time.Duration) {
	t.Helper()
	argv := append(append(slices.Clone(wrap), relaydBin), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	// The race runtime sleeps 1 s at exit by default; check's time is tested.
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return errb.String(), err == nil, time.Since(start)
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("relayd %v still running after 15 s:\n%s", args, errb.String())
		return "", false, 0
	}
}

// runRefusal is why relayd run refused to start: its last line, "relayd: "
// and the error (a joined error continues on the next lines).
func runRefusal(stderr string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		switch {
		case strings.HasPrefix(l, "relayd: "):
			lines = append(lines, strings.TrimPrefix(l, "relayd: "))
		case len(lines) > 0 && !strings.HasPrefix(l, "{"): // a joined error's next lines
			lines = append(lines, l)
		}
	}
	return lines
}

// Every way relayd run refuses to start, relayd check refuses the same
// settings, naming the same problems, in under a second and without
// binding anything: the table walks the refusals of each phase run goes
// through (the file's YAML, the flags, Validate, the files the config
// names, the open proxy and admin refusals, the policy against next[0],
// the identity, the relay sockets, the listen addresses, the fleet file),
// then all of them at once.
func TestCheckRefusesWhatRunRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, err := linktls.NewCA("operator", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caPath := write("ca.crt", string(ca.CertPEM()), 0o644)
	client, err := ca.WriteIdentity(dir, caPath, "alice", linktls.RoleClient, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	osaka, err := ca.WriteIdentity(dir, caPath, "osaka", linktls.RoleRelay, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	token := write("short.token", "short\n", 0o600)
	fleet := write("fleet.yaml", "relays:\n  - {name: tokyo, admin: \"10.9.0.1:9090\"}\n  - {name: osaka, admin: \"10.9.0.2:9090\"}\n", 0o600)
	// Loopback listeners on ports the kernel picks: a run that passes its
	// checks binds nothing anyone else uses.
	ports := []string{"--socks", "127.0.0.1:0", "--http", "127.0.0.1:0", "--admin", "127.0.0.1:0"}
	cases := []struct {
		name string
		args []string
		want []string // what both name
	}{
		{"yaml: unknown key", []string{"--config", write("typo.yaml", "sock: 127.0.0.1:1080\n", 0o600)}, []string{"field sock not found"}},
		{"flags: --password without --user", []string{"--password", "x"}, []string{"--password needs --user"}},
		{"validate: several keys", []string{"--config", write("bad.yaml", "probe: {mode: ring}\nlog: {level: loud}\nlimits: {max_conns: -1}\n", 0o600)},
			[]string{`probe.mode: "ring"`, `log.level: "loud"`, "limits.max_conns: must be 0 (from the file limit) or more"}},
		{"credentials file missing", []string{"--credentials", filepath.Join(dir, "none")}, []string{"auth.credentials_file: open"}},
		{"admin token file too short", []string{"--admin-token-file", token}, []string{"admin_token_file " + token + ": the token must be at least 16 bytes"}},
		{"fleet secret file missing", []string{"--fleet-secret-file", filepath.Join(dir, "none.key")}, []string{"fleet_secret_file: open"}},
		{"open proxy", []string{"--socks", "0.0.0.0:0"}, []string{"socks: refusing to listen on non-loopback 0.0.0.0:0 without credentials"}},
		{"admin off loopback without a token", []string{"--admin", "0.0.0.0:0"}, []string{"admin: refusing to serve the admin API on non-loopback"}},
		{"next[0] the relay policy refuses", []string{"--next", "socks5://10.9.0.7:1080"}, []string{"next[0] 10.9.0.7:1080"}},
		{"identity: a client certificate on a relay listener", append(client.Flags(), "--relay-listen", "127.0.0.1:0"), []string{"relay: identity.cert " + client.Cert + " is a client certificate"}},
		{"identity: another relay's name", append(osaka.Flags(), "--name", "tokyo"), []string{`name: "tokyo", but identity.cert ` + osaka.Cert + ` names "osaka"`}},
		{"identity: key missing", []string{"--identity-ca", caPath, "--identity-cert", osaka.Cert, "--identity-key", filepath.Join(dir, "none.key")}, []string{"identity key: open"}},
		{"relay socket: no such congestion control", []string{"--relay-congestion", "nosuchcc"}, []string{"relay_socket"}},
		{"listen address not on this host", []string{"--socks", "192.0.2.1:1080"}, []string{"socks: 192.0.2.1:1080: no interface of this host has 192.0.2.1"}},
		{"fleet file: this relay not listed", []string{"--fleet", fleet, "--name", "kyoto", "--relay-allow", "10.9.0.0/16"}, []string{`this relay ("kyoto") is not listed`}},
		{"fleet file: peers only policy.allow opens", []string{"--fleet", fleet, "--name", "tokyo", "--allow", "10.9.0.0/16"}, []string{"fleet: relay osaka's admin address 10.9.0.2:9090", "policy.relay_allow"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append(slices.Clone(ports), c.args...)
			runErr, ok, _ := relaydExit(t, append([]string{"run", "--log-format", "json"}, args...)...)
			if ok {
				t.Fatalf("relayd run %v started", c.args)
			}
			refusal := runRefusal(runErr)
			checkErr, ok, took := relaydExit(t, append([]string{"check"}, args...)...)
			if ok {
				t.Fatalf("relayd check %v passed what run refused:\n%s", c.args, strings.Join(refusal, "\n"))
			}
			if took > time.Second {
				t.Errorf("relayd check took %v, want < 1 s", took)
			}
			for _, w := range c.want {
				if !strings.Contains(runErr, w) {
					t.Errorf("run does not say %q:\n%s", w, runErr)
				}
				if !strings.Contains(checkErr, w) {
					t.Errorf("check does not say %q:\n%s", w, checkErr)
				}
			}
			for _, l := range refusal {
				if !strings.Contains(checkErr, l) {
					t.Errorf("run refused with %q; check does not name it:\n%s", l, checkErr)
				}
			}
		})
	}

	// One config wrong in independent ways: check names every one.
	many := []string{"--max-conns", "-1", "--credentials", filepath.Join(dir, "none"), "--fleet-secret-file", filepath.Join(dir, "none.key"),
		"--admin-token-file", token, "--http", "192.0.2.1:8080", "--relay-congestion", "nosuchcc"}
	checkErr, ok, took := relaydExit(t, append(append([]string{"check"}, ports...), many...)...)
	if ok || took > time.Second {
		t.Fatalf("check of six problems: passed %v, took %v", ok, took)
	}
	for _, w := range []string{"limits.max_conns", "auth.credentials_file", "fleet_secret_file", "admin_token_file", "http: 192.0.2.1:8080", "relay_socket", "check: 6 problem(s)"} {
		if !strings.Contains(checkErr, w) {
			t.Errorf("check of six problems does not name %q:\n%s", w, checkErr)
		}
	}

	// And what run starts on, check passes; the exposed secret is a
	// warning, a failure only with --strict.
	secret := write("fleet.key", "0123456789abcdef0123456789abcdef\n", 0o644)
	good := append(slices.Clone(ports), "--fleet-secret-file", secret, "--relay-listen", "127.0.0.1:0")
	out, ok, took := relaydExit(t, append([]string{"check"}, good...)...)
	if !ok || took > time.Second || !strings.Contains(out, "warning: secret file exposed: fleet_secret_file "+secret) {
		t.Fatalf("check of a config run starts on: ok %v in %v:\n%s", ok, took, out)
	}
	if out, ok, _ := relaydExit(t, append([]string{"check", "--strict"}, good...)...); ok || !strings.Contains(out, "check: 1 problem(s)") {
		t.Fatalf("check --strict with a warning: ok %v:\n%s", ok, out)
	}
	startRelayd(t, good...)
}

// metricName matches the metric names a PromQL expression can name.
var metricName = regexp.MustCompile(`\b(relaymesh_[a-z0-9_]+|process_[a-z_]+|go_[a-z0-9_]+)\b`)

// Every metric the Grafana dashboard and the alert rules name is one a
// real relayd exports (a histogram by its _bucket, _sum and _count
// series); promtool accepts the rules, their unit tests pass, and it
// lints the scrape.
func TestDashboardAndRulesName(t *testing.T) {
	r := startRelayd(t)
	lines := metricLines(t, r)
	exported := map[string]bool{}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) >= 4 && f[0] == "#" && f[1] == "TYPE" {
			exported[f[2]] = true
			if f[3] == "histogram" {
				exported[f[2]+"_bucket"], exported[f[2]+"_sum"], exported[f[2]+"_count"] = true, true, true
			}
		}
	}
	for _, want := range []string{"relaymesh_build_info", "relaymesh_conn_slots_used", "relaymesh_identity_cert_expiry_timestamp_seconds", "process_open_fds"} {
		if !exported[want] {
			t.Fatalf("relayd does not export %s: the scrape is not what the test expects", want)
		}
	}
	dash, err := os.ReadFile("../configs/grafana/relaymesh.json")
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(dash, &board); err != nil {
		t.Fatalf("configs/grafana/relaymesh.json: %v", err)
	}
	named := map[string]string{} // metric -> where
	for _, p := range board.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				named[m] = "dashboard panel " + p.Title
			}
		}
	}
	rulesPath := "../configs/prometheus/relaymesh.rules.yml"
	rules, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(rules), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		for _, m := range metricName.FindAllString(l, -1) {
			named[m] = "rule line " + strings.TrimSpace(l)
		}
	}
	if len(named) < 20 {
		t.Fatalf("found %d metric names in the dashboard and rules: the test no longer reads them", len(named))
	}
	for m, where := range named {
		if !exported[m] {
			t.Errorf("%s names %s, which relayd does not export", where, m)
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Need(t, "promtool not installed (%v): make test-deps installs it as root (Debian package prometheus)", err)
	}
	for _, args := range [][]string{{"check", "rules", rulesPath}, {"test", "rules", "../configs/prometheus/relaymesh.rules.test.yml"}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	lint := exec.Command(promtool, "check", "metrics")
	lint.Stdin = strings.NewReader(strings.Join(lines, "\n"))
	if out, err := lint.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on relayd's /metrics: %v\n%s", err, out)
	}
}

// The shipped unit passes systemd-analyze verify (with its relayd path
// pointed at the binary built here: verify needs the executables), and
// its commands are relayd command lines that parse: check passes on the
// example config, and run starts on it.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testenv.Need(t, "systemd-analyze not installed (%v): make test-deps installs it as root (Debian package systemd)", err)
	}
	unit, err := os.ReadFile("../configs/systemd/relayd.service")
	if err != nil {
		t.Fatal(err)
	}
	const shipped = "/usr/local/bin/relayd"
	if !bytes.Contains(unit, []byte("ExecStart="+shipped+" run ")) {
		t.Fatalf("the unit's ExecStart is not %s run ...: the test no longer knows where relayd is", shipped)
	}
	dir := t.TempDir()
	verify := func(text string) string {
		t.Helper()
		path := filepath.Join(dir, "relayd.service")
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(text, shipped, relaydBin)), 0o644); err != nil {
			t.Fatal(err)
		}
		// verify exits 0 on unknown keys and bad values, warning on
		// stderr: any output is a failure.
		out, err := exec.Command(analyze, "verify", path).CombinedOutput()
		if err != nil && len(out) == 0 {
			out = []byte(err.Error())
		}
		return strings.TrimSpace(string(out))
	}
	if out := verify(string(unit)); out != "" {
		t.Errorf("systemd-analyze verify configs/systemd/relayd.service:\n%s", out)
	}
	// The hardening, as systemd scores it (0 to 100, shown as 0.0 to
	// 10.0): 2.0 or less is what systemd calls OK.
	if out, err := exec.Command(analyze, "security", "--offline=yes", "--threshold=20", filepath.Join(dir, "relayd.service")).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze security: exposure above 2.0 (%v):\n%s", err, out)
	}
	if out := verify(strings.Replace(string(unit), "NoNewPrivileges=", "NoNewPrivilegez=", 1)); !strings.Contains(out, "NoNewPrivilegez") {
		t.Errorf("verify of a misspelt key said nothing (%q): the test cannot fail", out)
	}
	example, err := filepath.Abs("../configs/relayd.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(unit), "\n") {
		key, cmdline, ok := strings.Cut(l, "=")
		if !ok || (key != "ExecStart" && key != "ExecStartPre") {
			continue
		}
		args := strings.Fields(strings.ReplaceAll(cmdline, "/etc/relaymesh/relayd.yaml", example))[1:]
		if key == "ExecStartPre" {
			if out, ok, _ := relaydExit(t, args...); !ok {
				t.Errorf("%s: %s", l, out)
			}
			continue
		}
		// The example's listeners are the defaults; the harness moves
		// them to free ports (its flags come first, the unit's win).
		startRelayd(t, append(args[1:], "--socks", "127.0.0.1:0", "--http", "127.0.0.1:0", "--admin", "127.0.0.1:0")...)
	}
}

// --version and the version command say the same, with the Go version;
// /metrics labels relaymesh_build_info with that version and Go.
func TestVersion(t *testing.T) {
	r := startRelayd(t)
	metrics := metricLines(t, r)
	for _, args := range [][]string{{"--version"}, {"version"}} {
		cmd := exec.Command(relaydBin, args...)
		cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("relayd %v: %v", args, err)
		}
		line := strings.TrimSpace(string(out))
		m := regexp.MustCompile(`^relayd version (\S+)( \(\S+\))? (go\S+)$`).FindStringSubmatch(line)
		if m == nil || m[3] != runtime.Version() {
			t.Fatalf("relayd %v: %q, want relayd version VERSION [(COMMIT TIME)] %s", args, line, runtime.Version())
		}
		want := `relaymesh_build_info{go="` + m[3] + `",version="` + m[1] + `"} 1`
		if !slices.Contains(metrics, want) {
			t.Fatalf("no %s in /metrics", want)
		}
	}
}

// check --online asks the registry: a fleet peer whose admin port does
// not answer is a warning (check passes), one that answers is not named;
// a Consul agent that does not answer is a problem, which check offline
// does not see.
func TestCheckOnline(t *testing.T) {
	peer := startRelayd(t)
	closed := startServer(t, echo)
	closedAddr := closed.addr()
	closed.ln.Close() // a port nothing listens on any more
	fleet := filepath.Join(t.TempDir(), "fleet.yaml")
	data := "relays:\n  - {name: tokyo, admin: \"127.0.0.1:1\"}\n" +
		"  - {name: osaka, admin: \"" + peer.admin + "\"}\n" +
		"  - {name: kyoto, admin: \"" + closedAddr + "\"}\n"
	if err := os.WriteFile(fleet, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"check", "--socks", "127.0.0.1:0", "--http", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--fleet", fleet, "--name", "tokyo", "--relay-allow", "127.0.0.0/8"}
	out, ok, _ := relaydExit(t, append(args, "--online")...)
	if !ok || !strings.Contains(out, "a peer's admin port does not answer") || !strings.Contains(out, "kyoto") || strings.Contains(out, "osaka") {
		t.Fatalf("check --online, osaka up and kyoto down: ok %v:\n%s", ok, out)
	}
	if out, ok, _ := relaydExit(t, args...); !ok || strings.Contains(out, "kyoto") {
		t.Fatalf("check offline dialled the peers: ok %v:\n%s", ok, out)
	}

	consul := []string{"check", "--socks", "127.0.0.1:0", "--http", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--consul", closedAddr, "--name", "tokyo"}
	if out, ok, _ := relaydExit(t, consul...); !ok {
		t.Fatalf("check offline of a Consul relay: %s", out)
	}
	if out, ok, _ := relaydExit(t, append(consul, "--online")...); ok || !strings.Contains(out, "consul.addr "+closedAddr+": the agent does not answer") {
		t.Fatalf("check --online with no Consul agent: ok %v:\n%s", ok, out)
	}
}

// check only reads from Consul: it never registers or deregisters the
// relay it checks (a relay of that name may be running on this host).
// The agent here answers the two reads --online makes, as Consul's HTTP
// API does, and records every request.
func TestCheckOnlyReadsConsul(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/status/leader":
			fmt.Fprint(w, `"127.0.0.1:8300"`)
		case "/v1/kv/relaymesh/measurements/tokyo":
			http.NotFound(w, r) // nothing published yet
		default:
			http.Error(w, "unexpected", http.StatusTeapot)
		}
	}))
	defer agent.Close()
	addr := strings.TrimPrefix(agent.URL, "http://")
	for _, online := range []bool{false, true} {
		args := []string{"check", "--socks", "127.0.0.1:0", "--http", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--consul", addr, "--name", "tokyo"}
		if online {
			args = append(args, "--online")
		}
		if out, ok, _ := relaydExit(t, args...); !ok {
			t.Fatalf("check (online %v) against an agent that answers: %s", online, out)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"GET /v1/status/leader", "GET /v1/kv/relaymesh/measurements/tokyo"}; !slices.Equal(seen, want) {
		t.Fatalf("check sent %q to Consul, want only the reads of --online, %q", seen, want)
	}
}

// A port below net.ipv4.ip_unprivileged_port_start needs
// CAP_NET_BIND_SERVICE: relayd without it (root's capabilities dropped with
// setpriv, as in a unit without AmbientCapabilities) refuses to run, and
// check says why.
func TestCheckPrivilegedPort(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		t.Fatal(err)
	}
	start, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if start < 2 {
		t.Skipf("net.ipv4.ip_unprivileged_port_start is %d here: no port needs a capability", start)
	}
	var wrap []string
	if os.Geteuid() == 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			testenv.Need(t, "setpriv not installed (%v): Debian's util-linux has it", err)
		}
		wrap = []string{setpriv, "--bounding-set=-all", "--inh-caps=-all", "--"}
	}
	addr := "127.0.0.1:" + strconv.Itoa(start-1)
	want := addr + ": port " + strconv.Itoa(start-1) + " is below net.ipv4.ip_unprivileged_port_start"
	for _, cmd := range []string{"run", "check"} {
		out, ok, _ := relaydExitWrapped(t, wrap, cmd, "--socks", addr, "--http", "", "--admin", "")
		if ok || !strings.Contains(out, want) {
			t.Errorf("relayd %s --socks %s without CAP_NET_BIND_SERVICE: ok %v:\n%s", cmd, addr, ok, out)
		}
	}
}

// A real Prometheus scrapes a real relay the way docs/operations.md
// configures it (HTTPS verified with the operator CA and the relay's name,
// the relay's admin token, job relabelled to relayd) and evaluates the
// shipped rules on what it scraped: the relay is up, and its certificate,
// issued for 10 days, fires RelaymeshCertificateExpiresSoon.
func TestPrometheusScrapesRelay(t *testing.T) {
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		testenv.Need(t, "prometheus not installed (%v): make test-deps installs it as root (Debian package prometheus)", err)
	}
	dir := t.TempDir()
	ca, err := linktls.NewCA("operator", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caPath := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caPath, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	id, err := ca.WriteIdentity(dir, caPath, "tokyo", linktls.RoleRelay, 10*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(token, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRelayd(t, append(id.Flags(), "--relay-listen", "127.0.0.1:0", "--admin-token-file", token)...)
	rules, err := filepath.Abs("../configs/prometheus/relaymesh.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte(`global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: relayd-tokyo
    scheme: https
    authorization: {credentials_file: `+token+`}
    tls_config: {ca_file: `+caPath+`, server_name: tokyo}
    static_configs: [{targets: ["`+r.admin+`"]}]
    relabel_configs: [{target_label: job, replacement: relayd}]
rule_files: [`+rules+`]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	web := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(prom, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	query := func(q string) string {
		resp, err := http.Get("http://" + web + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		up := query(`up{job="relayd", instance="` + r.admin + `"}`)
		alert := query(`ALERTS{alertname="RelaymeshCertificateExpiresSoon", alertstate="firing", job="relayd"}`)
		if strings.Contains(up, `"1"]`) && strings.Contains(alert, `"alertstate":"firing"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: up %s\nalert %s\nprometheus:\n%s", up, alert, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := query(`ALERTS{alertstate="firing", alertname!="RelaymeshCertificateExpiresSoon"}`); !strings.Contains(got, `"result":[]`) {
		t.Errorf("alerts firing on an idle, healthy relay: %s", got)
	}
}
