package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dop251/goja"
)

// rulesLab is a fleet of two relays on loopback, both with relay
// listeners: r1 routes its clients by plan under a rule file
// (planning.rules), r2 is a plain exit; relayctl connect runs on the same
// fleet with the same file (--rules). site and planSite answer HTTP with
// token.
type rulesLab struct {
	fleet, secret, rules string
	site, planSite       *server
	token                string
	r1, r2               *relayd
	socks, http          string // relayctl connect's listeners
	connectLog           *syncBuf
}

// rulesFor is the lab's rule file: every action, every kind that a
// loopback destination can exercise, and MATCH.
func rulesFor(planPort int) string {
	return fmt.Sprintf(`# relaymesh e2e rules
DOMAIN-SUFFIX,blocked.test,REJECT
DOMAIN-KEYWORD,tracker,REJECT
DOMAIN,localhost,CHAIN:r2
DST-PORT,%d,PLAN
IP-CIDR,127.0.0.0/8,DIRECT
MATCH,REJECT
`, planPort)
}

func startRulesLab(t *testing.T) *rulesLab {
	t.Helper()
	lab := &rulesLab{token: randomToken(t)}
	hello := func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil || line == "\r\n" {
				break
			}
		}
		fmt.Fprintf(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n%s\n", lab.token)
	}
	lab.site, lab.planSite = startServer(t, hello), startServer(t, hello)
	dir := t.TempDir()
	lab.secret = fleetSecretFile(t)
	lab.rules = filepath.Join(dir, "rules.txt")
	writeFile(t, lab.rules, rulesFor(lab.planSite.ln.Addr().(*net.TCPAddr).Port))
	const adminToken = "e2e-token-0123456789"
	type relay struct{ name, admin, relay string }
	relays := []relay{{"r1", freeAddr(t), freeAddr(t)}, {"r2", freeAddr(t), freeAddr(t)}}
	lab.fleet = filepath.Join(dir, "fleet.yaml")
	fleet := "admin_token: " + adminToken + "\nrelays:\n"
	for _, r := range relays {
		fleet += fmt.Sprintf("  - {name: %s, region: reg-%s, admin: %s, relay: %s}\n", r.name, r.name, r.admin, r.relay)
	}
	writeFile(t, lab.fleet, fleet)
	for _, r := range []relay{relays[1], relays[0]} {
		cfg := filepath.Join(dir, r.name+".yaml")
		body := fmt.Sprintf("probe: {interval: 200ms, window: 10, timeout: 1s, pull_interval: 300ms}\nfleet: %s\n", lab.fleet)
		if r.name == "r1" {
			body += fmt.Sprintf("routing: plan\nplanning: {rules: %s}\n", lab.rules)
		}
		writeFile(t, cfg, body)
		d := startRelayd(t, "--config", cfg, "--name", r.name, "--admin", r.admin, "--admin-token", adminToken,
			"--allow-private", "--relay-listen", r.relay, "--fleet-secret-file", lab.secret)
		if r.name == "r1" {
			lab.r1 = d
		} else {
			lab.r2 = d
		}
	}
	lab.socks, lab.http = freeAddr(t), freeAddr(t)
	cmd := exec.Command(relayctlBin, "connect", "--fleet", lab.fleet, "--fleet-secret-file", lab.secret,
		"--socks", lab.socks, "--http", lab.http, "--rules", lab.rules, "--log-level", "debug")
	lab.connectLog = &syncBuf{}
	stop := startConnectLogged(t, cmd, lab.connectLog, "each destination")
	t.Cleanup(stop)
	return lab
}

// rulesCONNECT asks the HTTP proxy for a CONNECT tunnel to dst and, once
// given one, for "/" through it: the status, and the body.
func rulesCONNECT(t *testing.T, proxy, dst string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dst, dst)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s through %s: %v", dst, proxy, err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, ""
	}
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", dst)
	body, _ := io.ReadAll(br)
	return resp.StatusCode, string(body)
}

// pacVM runs a PAC file in a JavaScript engine, with the one PAC helper
// the file calls.
func pacVM(t *testing.T, pac string) *goja.Runtime {
	t.Helper()
	vm := goja.New()
	const helpers = `function shExpMatch(s, p) {
  return new RegExp("^" + p.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".") + "$").test(s);
}
`
	if _, err := vm.RunString(helpers + pac); err != nil {
		t.Fatalf("the PAC file does not run: %v\n%s", err, pac)
	}
	return vm
}

func pacCall(t *testing.T, vm *goja.Runtime, fn, url, host string) string {
	t.Helper()
	f, ok := goja.AssertFunction(vm.Get(fn))
	if !ok {
		t.Fatalf("the PAC file has no function %s", fn)
	}
	v, err := f(goja.Undefined(), vm.ToValue(url), vm.ToValue(host))
	if err != nil {
		t.Fatalf("%s(%q, %q): %v", fn, url, host, err)
	}
	return v.String()
}

// within polls cond until it holds or 5 s have passed: a process's log
// line may come a little after the reply it logged.
func within(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// decided reports whether log has the rule router's decision for dst
// with action (JSON from relayd, console from relayctl connect).
func decided(log, dst, action string) bool {
	re := regexp.MustCompile(`"dst":\s*"` + regexp.QuoteMeta(dst) + `",\s*"action":\s*"` + regexp.QuoteMeta(action) + `"`)
	return re.MatchString(log)
}

// TestRulesSameAnswerEverywhere: one rule file, three consumers, the same
// answer for every destination. relayctl connect (--rules) and a relay
// with routing: plan (planning.rules) carry or refuse real tunnels
// (CONNECT through their HTTP proxies, SOCKS5 for the refusals), relayctl
// pac --rules writes a file that a JavaScript engine runs, and relayctl
// rules test names the same line. DIRECT and CHAIN are told apart by
// where the tunnel went: only CHAIN:r2 reaches the destination through
// r2. In the PAC file loopback is DIRECT before any rule (a browser's
// loopback is its own), so for these loopback destinations the file's
// rule decision (relaymeshAction) is compared, and FindProxyForURL's
// answer is checked for every code on hosts that are not loopback.
func TestRulesSameAnswerEverywhere(t *testing.T) {
	lab := startRulesLab(t)
	sitePort := strconv.Itoa(lab.site.ln.Addr().(*net.TCPAddr).Port)
	planPort := strconv.Itoa(lab.planSite.ln.Addr().(*net.TCPAddr).Port)
	pac, err := exec.Command(relayctlBin, "pac", "--proxy", lab.socks, "--http-proxy", lab.http, "--rules", lab.rules).Output()
	if err != nil {
		t.Fatalf("relayctl pac --rules: %v", err)
	}
	vm := pacVM(t, string(pac))
	var notThrough []string // destinations that must not reach r2
	for _, c := range []struct {
		dst    string
		line   int
		action string // as the rule file writes it
		pac    string // relaymeshAction's code
	}{
		{"ads.blocked.test:80", 2, "REJECT", "R"},
		{"mytracker.example:443", 3, "REJECT", "R"},
		{"localhost:" + sitePort, 4, "CHAIN:r2", "P"},
		{"127.0.0.1:" + planPort, 5, "PLAN", "P"},
		{"127.0.0.1:" + sitePort, 6, "DIRECT", "D"},
		{"[::1]:" + sitePort, 7, "REJECT", "R"},
		{"nothing.example:80", 7, "REJECT", "R"},
	} {
		t.Run(c.dst, func(t *testing.T) {
			host, port, _ := net.SplitHostPort(c.dst)
			for _, p := range []struct {
				name, socks, http string
				log               func() string
			}{
				{"relayctl connect", lab.socks, lab.http, lab.connectLog.String},
				{"relay r1 (routing: plan)", lab.r1.socks, lab.r1.http, lab.r1.logs},
			} {
				status, body := rulesCONNECT(t, p.http, c.dst)
				switch {
				case c.action == "REJECT" && status != http.StatusForbidden:
					t.Errorf("%s: CONNECT %s answered %d, want 403 (REJECT)", p.name, c.dst, status)
				case c.action != "REJECT" && (status != http.StatusOK || !strings.Contains(body, lab.token)):
					t.Errorf("%s: CONNECT %s answered %d %q, want 200 and the site (%s)", p.name, c.dst, status, body, c.action)
				}
				if c.action == "REJECT" && net.ParseIP(host) == nil {
					// SOCKS5 with optimistic data on (connect's default):
					// a REJECT is still answered, not reset after "succeeded".
					n, _ := strconv.Atoi(port)
					if rep, err := socksRaw(t, p.socks, connectReq(host, n)); err != nil || rep != 0x02 {
						t.Errorf("%s: SOCKS5 CONNECT %s: reply 0x%02x (%v), want 0x02 (not allowed by ruleset)", p.name, c.dst, rep, err)
					}
				}
				if !within(func() bool { return decided(p.log(), c.dst, c.action) }) {
					t.Errorf("%s logged no decision %s for %s:\n%s", p.name, c.action, c.dst, lastLines(p.log(), 20))
				}
			}
			// Where the tunnels went (a plan may take r2 or not): CHAIN
			// here, the others once every case has run (below).
			if c.action != "PLAN" && !strings.HasPrefix(c.action, "CHAIN") {
				notThrough = append(notThrough, c.dst)
			}
			if strings.HasPrefix(c.action, "CHAIN") && !within(func() bool { return strings.Contains(lab.r2.logs(), `"dst":"`+c.dst+`"`) }) {
				t.Errorf("%s (%s) did not go through r2", c.dst, c.action)
			}
			if got := pacCall(t, vm, "relaymeshAction", "https://"+c.dst+"/", strings.Trim(host, "[]")); got != c.pac {
				t.Errorf("PAC file: relaymeshAction %q, want %q (%s)", got, c.pac, c.action)
			}
			out, err := exec.Command(relayctlBin, "rules", "test", "--rules", lab.rules, c.dst).CombinedOutput()
			if want := fmt.Sprintf("line %d: ", c.line); err != nil || !strings.Contains(string(out), want) || !strings.Contains(string(out), c.action) {
				t.Errorf("relayctl rules test %s: %v, want %q and %s:\n%s", c.dst, err, want, c.action, out)
			}
		})
	}
	// r2 logs a tunnel (with its dst) when it closes; these closed when
	// their site did (their bodies were read), so by now r2 would have
	// logged any of them.
	time.Sleep(500 * time.Millisecond)
	for _, dst := range notThrough {
		if strings.Contains(lab.r2.logs(), `"dst":"`+dst+`"`) {
			t.Errorf("%s went through r2", dst)
		}
	}
	// FindProxyForURL's answer for each code, on hosts that are not
	// loopback: REJECT never falls back to DIRECT.
	for host, want := range map[string]string{
		"ads.blocked.test":  "PROXY 127.0.0.1:9",
		"nothing.example":   "PROXY 127.0.0.1:9",
		"localhost":         "DIRECT",
		"127.0.0.1":         "DIRECT",
		"www.blocked.test.": "PROXY 127.0.0.1:9",
	} {
		if got := pacCall(t, vm, "FindProxyForURL", "https://"+host+"/", host); got != want {
			t.Errorf("FindProxyForURL(%s) = %q, want %q", host, got, want)
		}
	}
	// connect serves the file relayctl pac --rules writes.
	resp, err := http.Get("http://" + lab.http + "/proxy.pac")
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(served) != string(pac) {
		t.Errorf("connect serves a PAC file other than relayctl pac --rules writes:\n%s\n---\n%s", served, pac)
	}
}

// TestConnectRulesCurl: curl through relayctl connect --rules, as a user
// would, routing each destination by its plan and with --dst (every
// destination through one plan): a DIRECT rule reaches a local server
// without a relay, a CHAIN rule through a real relayd, REJECT is refused
// on SOCKS5 (reply 0x02, which curl reports) and on the HTTP proxy (403),
// and the refused site is never reached.
func TestConnectRulesCurl(t *testing.T) {
	curl := requireCmd(t, "curl")
	lab := startRulesLab(t)
	t.Run("each destination by its plan", func(t *testing.T) {
		curlThroughRules(t, curl, lab, lab.socks, lab.http, lab.connectLog)
	})
	t.Run("--dst", func(t *testing.T) {
		planDst := lab.planSite.ln.Addr().String()
		socks, httpAddr := freeAddr(t), freeAddr(t)
		log := &syncBuf{}
		stop := startConnectLogged(t, exec.Command(relayctlBin, "connect", "--fleet", lab.fleet, "--fleet-secret-file", lab.secret,
			"--socks", socks, "--http", httpAddr, "--rules", lab.rules, "--dst", planDst, "--log-level", "debug"), log, "-> "+planDst)
		defer stop()
		curlThroughRules(t, curl, lab, socks, httpAddr, log)
	})
}

// curlThroughRules runs curl through a relayctl connect --rules with the
// lab's rules, at socks and httpAddr, whose output is log.
func curlThroughRules(t *testing.T, curl string, lab *rulesLab, socks, httpAddr string, log *syncBuf) {
	sitePort := strconv.Itoa(lab.site.ln.Addr().(*net.TCPAddr).Port)
	run := func(args ...string) (string, int) {
		out, err := exec.Command(curl, append([]string{"-sS", "--noproxy", "", "--max-time", "20"}, args...)...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	viaR2 := func(dst string) int { return strings.Count(lab.r2.logs(), `"dst":"`+dst+`"`) }
	before, chained := lab.site.conn.get(), viaR2("localhost:"+sitePort)
	if out, code := run("-x", "socks5h://"+socks, "http://127.0.0.1:"+sitePort+"/"); code != 0 || !strings.Contains(out, lab.token) {
		t.Fatalf("DIRECT: curl exit %d:\n%s", code, out)
	}
	if out, code := run("-x", "socks5h://"+socks, "http://localhost:"+sitePort+"/"); code != 0 || !strings.Contains(out, lab.token) {
		t.Fatalf("CHAIN:r2: curl exit %d:\n%s", code, out)
	}
	if !within(func() bool { return viaR2("localhost:"+sitePort) > chained }) {
		t.Fatalf("CHAIN:r2 did not go through r2:\n%s", lastLines(lab.r2.logs(), 20))
	}
	if n := lab.site.conn.get() - before; n != 2 {
		t.Fatalf("the site saw %d connections, want 2", n)
	}
	out, code := run("-x", "socks5h://"+socks, "http://ads.blocked.test:"+sitePort+"/")
	if code == 0 || !strings.Contains(out, "(2)") {
		t.Errorf("REJECT over SOCKS5: curl exit %d, want a failure naming reply 2 (not allowed):\n%s", code, out)
	}
	out, code = run("-o", "/dev/null", "-w", "%{http_code}", "-x", "http://"+httpAddr, "http://ads.blocked.test:"+sitePort+"/")
	if out != "403" {
		t.Errorf("REJECT over the HTTP proxy: curl exit %d, status %q, want 403", code, out)
	}
	out, code = run("-o", "/dev/null", "-w", "%{http_connect}", "-p", "-x", "http://"+httpAddr, "https://tracker.example/")
	if code == 0 || !strings.Contains(out, "403") {
		t.Errorf("REJECT over an HTTP CONNECT: curl exit %d, %q, want 403", code, out)
	}
	if n := lab.site.conn.get() - before; n != 2 {
		t.Fatalf("the site saw %d connections after the refusals, want 2", n)
	}
	if !within(func() bool { return strings.Contains(log.String(), "destination rejected by rule") }) {
		t.Errorf("connect did not log its rejections:\n%s", lastLines(log.String(), 20))
	}
	// r2 logs a tunnel when it closes; the DIRECT one closed with its
	// site, before the requests since.
	if viaR2("127.0.0.1:"+sitePort) != 0 {
		t.Errorf("DIRECT went through r2")
	}
}
