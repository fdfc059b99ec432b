// Package docker_test runs a relaymesh fleet as containers on the Docker
// engine: the image built FROM scratch with nothing pulled, a Consul server
// (the pinned bin/consul, also FROM scratch), three relays registering with
// it and measuring each other, relayctl planning against Consul, a download
// through the planned chain, and a relay killed under a live relayctl
// connect. The fleet runs as production does: each relay on its own identity
// from an operator CA (no shared secret, a token per relay), in a read-only
// container with no capabilities. Without a Docker engine (or bin/consul) it
// skips and says why.
package docker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/testenv"
	"github.com/relaymesh/relaymesh/pkg/traffic"
	"github.com/relaymesh/relaymesh/pkg/traffic/traffictest"
)

// adminToken is relay name's own admin token (relays and relayctl reach
// each other's admin APIs with their certificates, not a token).
func adminToken(name string) string { return "e2e-docker-admin-token-of-" + name }

// dockerCmd runs docker and returns its combined output.
func dockerCmd(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command("docker", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

func must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := dockerCmd(args...)
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// fleet is one test's containers, networks and images, all named by prefix.
type fleet struct {
	t      *testing.T
	prefix string
	image  string
	consul string
	dir    string // bind-mounted read-only as /etc/relaymesh
}

func (f *fleet) name(s string) string { return f.prefix + "-" + s }

// buildImages builds relaymesh and consul images FROM scratch, pulling
// nothing: the relaymesh one with the repository's Dockerfile (target local).
func (f *fleet) buildImages() {
	t := f.t
	ctxDir := t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(ctxDir, "bin", "docker")+"/", "../../cmd/relayd", "../../cmd/relayctl")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), df, 0o644); err != nil {
		t.Fatal(err)
	}
	must(t, "build", "--target", "local", "-t", f.image, ctxDir)
	t.Cleanup(func() { _, _ = dockerCmd("rmi", "-f", f.image) })

	cdir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cdir, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile("../../bin/consul")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdir, "consul"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdir, "Dockerfile"), []byte("FROM scratch\nCOPY . /\nENTRYPOINT [\"/consul\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	must(t, "build", "-t", f.consul, cdir)
	t.Cleanup(func() { _, _ = dockerCmd("rmi", "-f", f.consul) })
}

// run starts a detached container and removes it (and says what it
// logged, on failure) at the end.
func (f *fleet) run(name string, args ...string) {
	t := f.t
	must(t, append([]string{"run", "-d", "--name", f.name(name)}, args...)...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := dockerCmd("logs", "--tail", "60", f.name(name))
			t.Logf("--- %s logs ---\n%s", name, logs)
		}
		_, _ = dockerCmd("rm", "-f", f.name(name))
	})
}

func (f *fleet) ip(name, network string) string {
	return must(f.t, "inspect", "-f", fmt.Sprintf(`{{(index .NetworkSettings.Networks %q).IPAddress}}`, f.name(network)), f.name(name))
}

// issueIdentities makes an operator CA and issues each relay its identity
// and user a client one, into the mounted directory (readable by the
// containers' uid 65532: a test's keys, not an operator's).
func (f *fleet) issueIdentities(relays []string, user string) {
	t := f.t
	ca, err := linktls.NewCA("e2e docker CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caPath := filepath.Join(f.dir, "ca.crt")
	if err := os.WriteFile(caPath, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	issue := func(name, role string) {
		id, err := ca.WriteIdentity(f.dir, caPath, name, role, time.Hour)
		if err == nil {
			err = os.Chmod(id.Key, 0o644) // the containers' uid reads it
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range relays {
		issue(r, linktls.RoleRelay)
	}
	issue(user, linktls.RoleClient)
}

// relayConfig is a relay's relayd.yaml. Listeners take the container's
// front address so the relay registers that address with Consul.
func (f *fleet) relayConfig(name, ip string) {
	cfg := fmt.Sprintf(`name: %[1]s
region: %[1]s
socks: %[2]s:1080
http: %[2]s:8080
admin: %[2]s:9090
admin_token: %[3]s
relay: %[2]s:7000
identity: {ca: /etc/relaymesh/ca.crt, cert: /etc/relaymesh/%[1]s.crt, key: /etc/relaymesh/%[1]s.key}
open: true
policy: {allow_private: true}
consul: {addr: "%[4]s:8500"}
probe: {pull_interval: 1s}
log: {level: info, format: json}
`, name, ip, adminToken(name), f.name("consul"))
	if err := os.WriteFile(filepath.Join(f.dir, name+".yaml"), []byte(cfg), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func TestDockerFleet(t *testing.T) {
	if _, err := exec.LookPath("docker"); err != nil {
		testenv.Need(t, "no docker CLI: this test runs a fleet as containers; install Docker (Debian: apt-get install docker.io) and start its engine")
	}
	if out, err := dockerCmd("info", "--format", "{{.ServerVersion}}"); err != nil {
		testenv.Need(t, "no Docker engine answering (%v: %s): this test runs a fleet as containers; start the engine (systemctl start docker) and run as a user that may use it (root)", err, out)
	}
	if _, err := os.Stat("../../bin/consul"); err != nil {
		testenv.Need(t, "needs bin/consul for the Consul container: make bin/consul builds it (make test does)")
	}
	f := &fleet{t: t, prefix: fmt.Sprintf("rm-e2e-%d", time.Now().UnixNano()%1e9)}
	f.image, f.consul = f.prefix+"-relaymesh:local", f.prefix+"-consul:local"
	f.buildImages()

	// Two networks: front (the client, every relay, Consul) and back, which
	// is internal (no route from the host or the front) with the server and
	// relays r2 and r3 only. The client cannot reach the server directly:
	// only a chain through r2 or r3 can.
	for i, n := range []string{"front", "back"} {
		args := []string{"network", "create", "--subnet", fmt.Sprintf("10.%d.%d.0/24", 211+i, time.Now().Nanosecond()%200), f.name(n)}
		if n == "back" {
			args = append(args[:2], append([]string{"--internal"}, args[2:]...)...)
		}
		must(t, args...)
		t.Cleanup(func() { _, _ = dockerCmd("network", "rm", f.name(n)) })
	}
	f.dir = t.TempDir()
	if err := os.Chmod(f.dir, 0o755); err != nil { // relays run as uid 65532
		t.Fatal(err)
	}
	f.issueIdentities([]string{"r1", "r2", "r3"}, "alice")
	mount := f.dir + ":/etc/relaymesh:ro"

	f.run("consul", "--network", f.name("front"), "--user", "0", f.consul,
		"agent", "-dev", "-client", "0.0.0.0", "-bind", `{{ GetPrivateIP }}`, "-log-level", "warn")
	f.run("srv", "--network", f.name("back"), "--entrypoint", "/relayctl", f.image, "lab", "traffic", "--listen", ":8000")

	// Relays: addresses are fixed before start so each config can name its own.
	frontNet := must(t, "network", "inspect", "-f", "{{(index .IPAM.Config 0).Subnet}}", f.name("front"))
	base := strings.TrimSuffix(frontNet, "0/24")
	relayIP := map[string]string{}
	for i, r := range []string{"r1", "r2", "r3"} {
		ip := fmt.Sprintf("%s%d", base, 11+i)
		relayIP[r] = ip
		f.relayConfig(r, ip)
		f.run(r, "--network", f.name("front"), "--ip", ip, "-v", mount, "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
			f.image, "run", "--config", "/etc/relaymesh/"+r+".yaml")
		if r != "r1" {
			must(t, "network", "connect", f.name("back"), f.name(r))
		}
	}

	consulAddr := f.ip("consul", "front") + ":8500"
	client := func(args ...string) (string, error) {
		all := append([]string{"run", "--rm", "--network", f.name("front"), "-v", mount,
			"-e", "RELAYMESH_IDENTITY_CERT=/etc/relaymesh/alice.crt", "--entrypoint", "/relayctl", f.image}, args...)
		return dockerCmd(all...)
	}
	srvAddr := f.name("srv") + ":8000"

	// Relays register and measure each other: every relay sees every other
	// (via Consul KV) within 30 s.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := client("rtt", "--consul", consulAddr, "-o", "json")
		var m struct {
			Pairs []struct {
				From, To string
				Samples  int
			} `json:"pairs"`
		}
		if err == nil && json.Unmarshal([]byte(out), &m) == nil {
			n := 0
			for _, p := range m.Pairs {
				if p.Samples > 0 {
					n++
				}
			}
			if n >= 6 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("relays did not measure each other through Consul in 30 s: %v\n%s", err, out)
		}
		time.Sleep(2 * time.Second)
	}

	// relayctl plan against Consul returns a chain (the server is behind r2/r3).
	out, err := client("plan", "--consul", consulAddr, "--dst", srvAddr, "-o", "json")
	if err != nil {
		t.Fatalf("relayctl plan: %v\n%s", err, out)
	}
	var plan struct {
		Chain []string `json:"chain"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil || len(plan.Chain) == 0 {
		t.Fatalf("plan: %v, chain %v\n%s", err, plan.Chain, out)
	}
	t.Logf("plan: %v", plan.Chain)

	// relayctl connect in a container, reached from here over front.
	f.run("client", "--network", f.name("front"), "-v", mount, "-e", "RELAYMESH_IDENTITY_CERT=/etc/relaymesh/alice.crt",
		"--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--entrypoint", "/relayctl", f.image,
		"connect", "--consul", consulAddr, "--dst", srvAddr, "--socks", "0.0.0.0:1080", "--http", "", "--open")
	socks := f.ip("client", "front") + ":1080"
	const size = 4 << 20
	download := func(timeout time.Duration) error {
		_, got, err := traffictest.GetViaSOCKS5(context.Background(), socks, fmt.Sprintf("http://%s/bytes/%d", srvAddr, size), timeout)
		if err != nil {
			return err
		}
		if got != traffic.ExpectedSHA256(size) {
			return fmt.Errorf("SHA-256 %s, want %s", got, traffic.ExpectedSHA256(size))
		}
		return nil
	}
	var chainNow []string
	deadline = time.Now().Add(30 * time.Second)
	for {
		err := download(10 * time.Second)
		logs, _ := dockerCmd("logs", f.name("client"))
		chainNow = lastChain(logs)
		if err == nil && len(chainNow) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("download through relayctl connect: %v\n%s", err, logs)
		}
		time.Sleep(time.Second)
	}
	t.Logf("connect's chain: %v; download matched its SHA-256", chainNow)

	// Kill the chain's last relay: new connections must take another chain
	// within 10 s.
	victim := chainNow[len(chainNow)-1]
	must(t, "kill", f.name(victim))
	killed := time.Now()
	for {
		err := download(2 * time.Second)
		if err == nil {
			logs, _ := dockerCmd("logs", f.name("client"))
			now := lastChain(logs)
			t.Logf("after killing %s: chain %v, working again after %.1f s", victim, now, time.Since(killed).Seconds())
			for _, r := range now {
				if r == victim {
					t.Fatalf("a download worked through the killed relay %s?", victim)
				}
			}
			break
		}
		if time.Since(killed) > 10*time.Second {
			logs, _ := dockerCmd("logs", f.name("client"))
			t.Fatalf("no working chain %.1f s after killing %s: %v\n%s", time.Since(killed).Seconds(), victim, err, logs)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// lastChain is the chain of the last "plan" line relayctl connect logged.
func lastChain(logs string) []string {
	var chain []string
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, "\tplan\t") && !strings.Contains(line, " plan ") {
			continue
		}
		i := strings.Index(line, `"chain": [`)
		if i < 0 {
			continue
		}
		rest := line[i+len(`"chain": [`):]
		rest = rest[:strings.Index(rest, "]")]
		chain = nil
		for _, f := range strings.Split(rest, ",") {
			if f = strings.Trim(strings.TrimSpace(f), `"`); f != "" {
				chain = append(chain, f)
			}
		}
	}
	return chain
}
