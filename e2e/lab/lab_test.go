// Package lab_test runs the real relayctl lab end to end: namespaces, TUN
// links, relayd on relay nodes, curl in the client node. It needs root. The
// Makefile runs it on its own (not beside other packages, not under the race
// detector): the lab's self-check fails, rightly, when the machine is busy.
package lab_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/lab"
	"github.com/relaymesh/relaymesh/pkg/testenv"
)

var (
	labBinOnce sync.Once
	labBinDir  string
	labBinErr  error
)

// labBins builds relayctl and relayd side by side (relayctl finds relayd
// next to itself). Without -race: relayctl runs the link emulator, whose
// timing the race detector would spoil.
func labBins(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Need(t, "needs root for network namespaces and TUN devices: run it as root (sudo make test)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		testenv.Need(t, "no /dev/net/tun (%v): load the tun module (modprobe tun); in a container, pass the device (docker run --device /dev/net/tun --cap-add NET_ADMIN)", err)
	}
	if _, err := exec.LookPath("curl"); err != nil {
		testenv.Need(t, "needs curl: make test-deps installs it as root (Debian package curl)")
	}
	labBinOnce.Do(func() {
		labBinDir, labBinErr = os.MkdirTemp("", "relaymesh-lab-bin")
		if labBinErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", labBinDir+"/", "../../cmd/relayctl", "../../cmd/relayd").CombinedOutput()
		if err != nil {
			labBinErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if labBinErr != nil {
		t.Fatal(labBinErr)
	}
	return labBinDir
}

// labTopology writes a topology file; name must be unique per test so labs
// of parallel runs never share namespaces.
func labTopology(t *testing.T, body string) string {
	path := filepath.Join(t.TempDir(), "topo.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// labUp starts the lab of topology file topo (named name) for the test,
// taken down when the test ends, and returns its state.
func labUp(t *testing.T, topo, name string) *lab.State {
	t.Helper()
	stateDir := t.TempDir()
	if out, code := relayctl(t, stateDir, "up", "-t", topo); code != 0 {
		t.Fatalf("lab up: %d\n%s", code, out)
	}
	t.Cleanup(func() { relayctl(t, stateDir, "down", name) })
	st, err := lab.LoadState(filepath.Join(stateDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// relayctl runs relayctl with a per-test state directory and returns its
// combined output and exit code.
func relayctl(t *testing.T, stateDir string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(labBins(t), "relayctl"), append([]string{"lab", "--state-dir", stateDir}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), 0
}

func netnsList(t *testing.T, prefix string) []string {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			found = append(found, f[0])
		}
	}
	return found
}

// TestLabRunDownloadThroughRelay is the lab issue's "done when": lab run on
// split2 with a download through relay r1; the bytes match the server's
// SHA-256, the self-check passes (exit 0), and nothing is left behind.
func TestLabRunDownloadThroughRelay(t *testing.T) {
	labBins(t)
	src, err := os.ReadFile("../../configs/lab/split2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	topo := labTopology(t, strings.Replace(string(src), "name: split2", "name: e2e-run", 1))
	const n = 8 << 20
	script := fmt.Sprintf(`set -e
got=$(curl -sS --max-time 60 -x socks5h://r1:1080 http://server:8000/bytes/%d | sha256sum | cut -d' ' -f1)
want=$(curl -sS --max-time 10 http://server:8000/sha256/%d)
echo "got=$got want=$want"
[ "$got" = "$want" ]
echo "fleet=$RELAYMESH_FLEET"`, n, n)
	// Exit 3 is lab run's "the self-check failed: this run is invalid".
	out, code := untilValid(t, func() (string, int) {
		return relayctl(t, t.TempDir(), "run", "-t", topo, "--", "sh", "-c", script)
	})
	t.Logf("lab run output:\n%s", out)
	if code != 0 {
		t.Fatalf("lab run exited %d", code)
	}
	if !strings.Contains(out, "fleet=/") {
		t.Fatal("the command did not see $RELAYMESH_FLEET")
	}
	if left := netnsList(t, "rm-e2e-run-"); len(left) > 0 {
		t.Fatalf("namespaces left behind: %v", left)
	}
}

// TestLabNativeChain: a lab relay chain on the native protocol
// (next_protocol: relaymesh) carries a download whose bytes match.
func TestLabNativeChain(t *testing.T) {
	labBins(t)
	topo := labTopology(t, `name: e2e-native
nodes:
  client: {}
  r1: {role: relay, next: [r2, r3], next_protocol: relaymesh}
  r2: {role: relay}
  r3: {role: relay}
  server: {role: server, region: tokyo}
links:
  # 50 Mbit/s: at the 1 Gbit/s default, four hops of a short-RTT transfer
  # sum past what the emulator can keep exact on 2 cores (and the
  # self-check rightly fails the run).
  - {between: [client, r1], rtt_ms: 4, rate_mbit: 50}
  - {between: [r1, r2], rtt_ms: 4, rate_mbit: 50}
  - {between: [r2, r3], rtt_ms: 4, rate_mbit: 50}
  - {between: [r3, server], rtt_ms: 4, rate_mbit: 50}
`)
	const n = 4 << 20
	script := fmt.Sprintf(`set -e
got=$(curl -sS --max-time 30 -x socks5h://r1:1080 http://server:8000/bytes/%d | sha256sum | cut -d' ' -f1)
want=$(curl -sS --max-time 30 -x socks5h://r1:1080 http://server:8000/sha256/%d)
[ "$got" = "$want" ] && echo match`, n, n)
	out, code := untilValid(t, func() (string, int) {
		return relayctl(t, t.TempDir(), "run", "-t", topo, "--", "sh", "-c", script)
	})
	if code != 0 || !strings.Contains(out, "match") {
		t.Fatalf("lab run exited %d:\n%s", code, out)
	}
}

// TestLabExitCodeAndIsolation: lab run exits with the command's code, and a
// node without a link to another cannot reach it.
func TestLabExitCodeAndIsolation(t *testing.T) {
	labBins(t)
	topo := labTopology(t, `name: e2e-iso
nodes:
  client: {}
  r1: {role: relay, region: mid}
  server: {role: server, region: far}
links:
  - {between: [client, r1], rtt_ms: 2}
  - {between: [r1, server], rtt_ms: 2}
`)
	// No client-server link: a direct connection fails, through r1 works.
	script := `curl -sS --max-time 5 -o /dev/null http://server:8000/healthz && exit 10
curl -sS --max-time 5 -x socks5h://r1:1080 http://server:8000/healthz || exit 11
exit 7`
	out, code := relayctl(t, t.TempDir(), "run", "-t", topo, "--", "sh", "-c", script)
	t.Logf("output:\n%s", out)
	if code != 7 {
		t.Fatalf("exit code %d, want 7 (10: reached server without a link; 11: relay path failed)", code)
	}
}

// TestLabUpExecStatusDown drives a lab that stays up between commands.
func TestLabUpExecStatusDown(t *testing.T) {
	labBins(t)
	state := t.TempDir()
	topo := labTopology(t, `name: e2e-up
defaults: {sysctl: {net.ipv4.tcp_congestion_control: cubic}}
nodes:
  client: {}
  r1: {role: relay, region: osaka, next: [r2]}
  r2: {role: relay, region: kyoto}
  server: {role: server, region: tokyo}
links:
  - {between: [client, r1], rtt_ms: 4}
  - {between: [r1, r2], rtt_ms: 4, rate_mbit: 100}
  - {between: [r2, server], rtt_ms: 4}
`)
	out, code := relayctl(t, state, "up", "-t", topo)
	t.Cleanup(func() { relayctl(t, state, "down", "e2e-up") })
	if code != 0 {
		t.Fatalf("lab up exited %d:\n%s", code, out)
	}
	if !strings.Contains(out, "lab e2e-up is up") {
		t.Fatalf("lab up output:\n%s", out)
	}
	// A second up of the same lab is refused with what to do.
	if out, code := relayctl(t, state, "up", "-t", topo); code == 0 || !strings.Contains(out, "relayctl lab down e2e-up") {
		t.Fatalf("second up: exit %d, output:\n%s", code, out)
	}
	// Upload 3 MiB through the HTTP front end of r1, chained to r2.
	script := `head -c 3145728 /dev/zero > /tmp/e2e-up-payload
curl -sS --max-time 30 -x http://r1:8080 --data-binary @/tmp/e2e-up-payload http://server:8000/upload
rm -f /tmp/e2e-up-payload`
	out, code = relayctl(t, state, "exec", "client", "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exec exited %d:\n%s", code, out)
	}
	var up struct {
		Bytes  int64  `json:"bytes"`
		SHA256 string `json:"sha256"`
	}
	if err := json.Unmarshal([]byte(out), &up); err != nil {
		t.Fatalf("upload answer %q: %v", out, err)
	}
	if want := sha256.Sum256(make([]byte, 3<<20)); up.Bytes != 3<<20 || up.SHA256 != hex.EncodeToString(want[:]) {
		t.Fatalf("upload %+v", up)
	}
	out, code = relayctl(t, state, "status", "-o", "json")
	if code != 0 {
		t.Fatalf("status exited %d:\n%s", code, out)
	}
	var st struct {
		Valid bool `json:"valid"`
		Nodes []struct {
			Name    string `json:"name"`
			Running bool   `json:"running"`
			Service string `json:"service"`
		} `json:"nodes"`
		Links []struct {
			Between [2]string `json:"between"`
			AB      struct {
				Bytes uint64 `json:"bytes"`
			} `json:"ab"`
		} `json:"links"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status json: %v\n%s", err, out)
	}
	if len(st.Nodes) != 4 || len(st.Links) != 3 {
		t.Fatalf("status: %d nodes, %d links:\n%s", len(st.Nodes), len(st.Links), out)
	}
	for _, n := range st.Nodes {
		if n.Service != "" && !n.Running {
			t.Errorf("node %s: %s not running", n.Name, n.Service)
		}
	}
	// The upload crossed r1->r2 (link 1, direction ab).
	if st.Links[1].AB.Bytes < 3<<20 {
		t.Errorf("link r1-r2 carried %d bytes toward r2, want >= 3 MiB", st.Links[1].AB.Bytes)
	}
	// The verdict itself is asserted through lab run's exit code above;
	// here a VM hiccup during the upload may rightly make it invalid.
	if !st.Valid {
		t.Logf("self-check invalid (a busy or hiccuping machine):\n%s", out)
	}
	// Change a link while the lab runs: the TCP handshake to r1 (one RTT)
	// follows the new delay.
	if out, code := relayctl(t, state, "link", "r1", "client", "--rtt-ms", "40"); code != 0 || !strings.Contains(out, "delay 20.000/20.000 ms") {
		t.Fatalf("lab link exited %d:\n%s", code, out)
	}
	if out, code := relayctl(t, state, "link", "r1", "client", "--loss", "1.5"); code == 0 || !strings.Contains(out, "loss") {
		t.Fatalf("lab link with loss 1.5: exit %d, want an error naming loss:\n%s", code, out)
	}
	// The median of 5 handshakes (curl's time_connect less its name lookup,
	// which it includes): one sample can meet a VM hiccup that the
	// self-check would flag on a longer run.
	out, code = relayctl(t, state, "exec", "client", "--", "sh", "-c",
		`for i in 1 2 3 4 5; do curl -sS -o /dev/null -w '%{time_connect} %{time_namelookup}\n' http://r1:9090/healthz || exit 1; done`)
	var connects []float64
	fields := strings.Fields(out)
	for i := 0; i+1 < len(fields); i += 2 {
		var conn, lookup float64
		if _, err := fmt.Sscan(fields[i], &conn); err != nil {
			break
		}
		if _, err := fmt.Sscan(fields[i+1], &lookup); err != nil {
			break
		}
		connects = append(connects, conn-lookup)
	}
	if code != 0 || len(connects) != 5 {
		t.Fatalf("curl to r1 exited %d: %q", code, out)
	}
	// The link was 4 ms and is now 40 ms; a change lost, or applied to one
	// direction only (22 ms) or twice (80 ms), lands far outside the bounds.
	// They leave 4 ms for curl's own scheduling on a busy 2-core machine,
	// where a median of 41.03 ms has been seen with the link right.
	slices.Sort(connects)
	if med := connects[2]; med < 0.0395 || med > 0.044 {
		t.Fatalf("TCP handshake with r1 took %.2f ms (median of %v s) after setting the link's RTT to 40 ms: want 39.5 to 44 ms", med*1000, connects)
	}
	if out, code := relayctl(t, state, "down"); code != 0 {
		t.Fatalf("down exited %d:\n%s", code, out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(netnsList(t, "rm-e2e-up-")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("namespaces left after down: %v", netnsList(t, "rm-e2e-up-"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLabNeedsRootSaysSo: without root every lab command says it needs root
// and how to run it, before touching anything.
func TestLabNeedsRootSaysSo(t *testing.T) {
	bins := labBins(t) // as root: we drop to nobody for the command
	dir, err := os.MkdirTemp("", "relaymesh-nobody")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(bins, "relayctl"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "relayctl")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"lab", "run", "-t", "/nonexistent.yaml", "--", "true"},
		{"lab", "status"},
		{"lab", "exec", "client", "--", "true"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "the lab needs root") || !strings.Contains(string(out), "sudo") {
			t.Errorf("relayctl %v as nobody: %v\n%s", args, err, out)
		}
	}
}

// labRunAttempts bounds how often a lab run the self-check called invalid
// is measured again. With the scheduler engine an invalid run is rare; the
// retry covers one now and then (a VM hiccup), and every retry is logged
// with "LAB RETRY" so a suite's retries can be counted:
// `go test -v ./e2e/lab/ | grep -c 'LAB RETRY'`.
const labRunAttempts = 3

// untilValid calls run (one `relayctl lab run`) until it does not exit 3
// (the self-check's "invalid"), at most labRunAttempts times, and returns
// the last output and exit code. If every run was invalid, the machine
// could not emulate the topology faithfully: outside CI the test is
// skipped with that reason; in CI (CI=true) it fails, so it cannot hide.
func untilValid(t *testing.T, run func() (string, int)) (string, int) {
	t.Helper()
	var out string
	var code int
	for attempt := 1; attempt <= labRunAttempts; attempt++ {
		out, code = run()
		if code != 3 {
			t.Logf("%s", verdictLines(out))
			return out, code
		}
		t.Logf("LAB RETRY %s: run %d of %d invalid (the self-check), measuring again in 5 s:\n%s", t.Name(), attempt, labRunAttempts, out)
		time.Sleep(5 * time.Second) // whatever held the machine up may pass
	}
	msg := fmt.Sprintf("this machine did not emulate the lab faithfully in %d runs (self-check; `sudo relayctl lab doctor` shows what it holds):\n%s", labRunAttempts, out)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return out, code
}

// verdictLines is what lab run said of its self-check (the check used and
// the worst link), so every run a test asserts on shows its error beside
// its figures in the log.
func verdictLines(out string) string {
	var keep []string
	in := false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "relayctl lab: self-check"):
			in = true
		case in && !strings.HasPrefix(line, "  "):
			in = false
		}
		if in {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}
