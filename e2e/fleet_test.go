package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/probe"
)

type fleetRelay struct {
	name, admin string
	r           *relayd
}

func writeFleetFile(t *testing.T, path, token string, relays []*fleetRelay) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "admin_token: %s\nrelays:\n", token)
	for _, r := range relays {
		fmt.Fprintf(&b, "  - {name: %s, region: reg-%s, admin: %s}\n", r.name, r.name, r.admin)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startFleetRelay runs relayd with a fleet file and fast probing.
func startFleetRelay(t *testing.T, dir, fleetPath, token string, fr *fleetRelay) {
	cfg := filepath.Join(dir, fr.name+".yaml")
	body := fmt.Sprintf("probe: {interval: 200ms, window: 10, timeout: 1s, pull_interval: 300ms}\nfleet: %s\n", fleetPath)
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	fr.r = startRelayd(t, "--config", cfg, "--name", fr.name, "--admin", fr.admin, "--admin-token", token, "--allow-private",
		"--fleet-secret-file", fleetSecretFile(t))
}

type rttOut struct {
	Pairs []struct {
		From, To  string
		RTTMs     float64 `json:"rtt_ms"`
		Loss      float64
		Samples   int
		Estimated bool
		AgeS      float64 `json:"age_s"`
	}
}

// relayctlCmd is relayctl with the fleet secret of fleetSecretFile in its
// environment, as lab commands give it: it verifies the relays' admin APIs
// with the fleet CA.
func relayctlCmd(t *testing.T, args ...string) *exec.Cmd {
	cmd := exec.Command(relayctlBin, args...)
	cmd.Env = append(os.Environ(), "RELAYMESH_FLEET_SECRET_FILE="+fleetSecretFile(t))
	return cmd
}

func relayctlJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, err := relayctlCmd(t, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("relayctl %v: %v\n%s", args, err, out)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("relayctl %v: %v\n%s", args, err, out)
	}
}

// waitRTT polls `relayctl rtt` until cond holds, for up to 10 s.
func waitRTT(t *testing.T, fleetPath string, cond func(rttOut) bool) rttOut {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var m rttOut
		relayctlJSON(t, &m, "rtt", "--fleet", fleetPath, "--output", "json")
		if cond(m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("rtt matrix did not get there in 10 s: %+v", m)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestFleetMeasurements: relays given a fleet file probe each other, share
// what they measure, re-read the file on SIGHUP, and relayctl nodes/rtt
// show the fleet, its health and the matrix.
func TestFleetMeasurements(t *testing.T) {
	dir := t.TempDir()
	fleetPath := filepath.Join(dir, "fleet.yaml")
	const token = "e2e-token-0123456789"
	relays := []*fleetRelay{{name: "a", admin: freeAddr(t)}, {name: "b", admin: freeAddr(t)}, {name: "c", admin: freeAddr(t)}}
	writeFleetFile(t, fleetPath, token, relays)
	for _, fr := range relays {
		startFleetRelay(t, dir, fleetPath, token, fr)
	}
	full := func(n int) func(rttOut) bool {
		return func(m rttOut) bool {
			ok := 0
			for _, p := range m.Pairs {
				if p.Loss == 0 && p.Samples >= 3 && p.RTTMs > 0 && p.RTTMs < 50 && !p.Estimated && p.AgeS < 5 {
					ok++
				}
			}
			return ok == n*(n-1)
		}
	}
	waitRTT(t, fleetPath, full(3))

	var nodes struct {
		Relays []struct {
			Name, Region, Health string
			Healthy              bool
		}
	}
	relayctlJSON(t, &nodes, "nodes", "--fleet", fleetPath, "--output", "json")
	if len(nodes.Relays) != 3 {
		t.Fatalf("nodes: %+v", nodes)
	}
	for _, n := range nodes.Relays {
		if !n.Healthy || n.Region != "reg-"+n.Name {
			t.Errorf("node %+v", n)
		}
	}

	// A fourth relay joins: the file is rewritten and a, b, c get SIGHUP
	// (they would also notice the change within 2 s on their own).
	d := &fleetRelay{name: "d", admin: freeAddr(t)}
	relays = append(relays, d)
	writeFleetFile(t, fleetPath, token, relays)
	startFleetRelay(t, dir, fleetPath, token, d)
	for _, fr := range relays[:3] {
		_ = fr.r.cmd.Process.Signal(syscall.SIGHUP)
	}
	waitRTT(t, fleetPath, full(4))

	// c goes away: the others' newest probes of c get no answer, and nodes
	// says c is unhealthy.
	relays[2].r.stop(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		relayctlJSON(t, &nodes, "nodes", "--fleet", fleetPath, "--output", "json")
		down := false
		for _, n := range nodes.Relays {
			if n.Name == "c" && !n.Healthy {
				down = true
			}
		}
		if down {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("c still healthy 10 s after it stopped: %+v", nodes)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The table form prints the matrix with the relay names.
	out, err := relayctlCmd(t, "rtt", "--fleet", fleetPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "FROM \\ TO") || !strings.Contains(string(out), "RTT in ms") {
		t.Fatalf("rtt table: %v\n%s", err, out)
	}
}

// TestAdminProbe: /v1/probe measures a destination on demand, needs the
// admin token, and obeys the destination policy.
func TestAdminProbe(t *testing.T) {
	target := startServer(t, func(c net.Conn) {})
	get := func(r *relayd, path, token string) (int, string) { return adminRequest(t, r, path, token) }
	open := startRelayd(t, "--allow-private", "--admin-token", "e2e-admin-token-0123")
	if code, _ := get(open, "/v1/probe?target="+target.addr(), ""); code != http.StatusUnauthorized {
		t.Fatalf("probe without token: %d", code)
	}
	code, body := get(open, "/v1/probe?target="+target.addr()+"&count=3", "e2e-admin-token-0123")
	var res struct {
		Summary struct {
			Samples, Lost int
			MedianMs      float64 `json:"median_ms"`
		}
	}
	if err := json.Unmarshal([]byte(body), &res); code != 200 || err != nil || res.Summary.Samples != 3 || res.Summary.Lost != 0 || res.Summary.MedianMs <= 0 {
		t.Fatalf("probe: %d %s", code, body)
	}
	// Back to back (a shortlist's rounds), and a gap too long refused.
	if code, body := get(open, "/v1/probe?target="+target.addr()+"&count=3&gap_ms=0", "e2e-admin-token-0123"); code != 200 ||
		json.Unmarshal([]byte(body), &res) != nil || res.Summary.Samples != 3 {
		t.Fatalf("probe gap_ms=0: %d %s", code, body)
	}
	if code, body := get(open, "/v1/probe?target="+target.addr()+"&gap_ms=5000", "e2e-admin-token-0123"); code != http.StatusBadRequest || !strings.Contains(body, "gap_ms: want 0..1000") {
		t.Fatalf("probe gap_ms=5000: %d %s", code, body)
	}
	if code, body := get(open, "/v1/probe?target="+target.addr()+"&count=500", "e2e-admin-token-0123"); code != http.StatusBadRequest {
		t.Fatalf("count 500: %d %s", code, body)
	}
	// A handshake's bound, timeout_ms: within 1..10000.
	if code, body := get(open, "/v1/probe?target="+target.addr()+"&count=1&timeout_ms=500", "e2e-admin-token-0123"); code != 200 ||
		json.Unmarshal([]byte(body), &res) != nil || res.Summary.Samples != 1 || res.Summary.MedianMs <= 0 {
		t.Fatalf("probe timeout_ms=500: %d %s", code, body)
	}
	for _, bad := range []string{"0", "10001", "soon"} {
		if code, body := get(open, "/v1/probe?target="+target.addr()+"&timeout_ms="+bad, "e2e-admin-token-0123"); code != http.StatusBadRequest || !strings.Contains(body, "timeout_ms: want 1..10000") {
			t.Fatalf("probe timeout_ms=%s: %d %s", bad, code, body)
		}
	}
	// Several targets in one request (a planner's round): each answered
	// in order, one that cannot be measured with its error, the request
	// itself fine; more than probe.MaxTargets refused.
	var batch struct {
		Results []struct {
			Target  string
			Summary *struct{ Samples int }
			Error   string
		}
	}
	code, body = get(open, "/v1/probe?target="+target.addr()+"&target=no-port&target="+target.addr()+"&count=2&gap_ms=0", "e2e-admin-token-0123")
	if err := json.Unmarshal([]byte(body), &batch); code != 200 || err != nil || len(batch.Results) != 3 ||
		batch.Results[0].Summary == nil || batch.Results[0].Summary.Samples != 2 || batch.Results[2].Summary == nil ||
		batch.Results[1].Summary != nil || !strings.Contains(batch.Results[1].Error, "want host:port") || batch.Results[1].Target != "no-port" {
		t.Fatalf("probe of 3 targets: %d %s", code, body)
	}
	many := "/v1/probe?count=1" + strings.Repeat("&target="+target.addr(), probe.MaxTargets+1)
	if code, body := get(open, many, "e2e-admin-token-0123"); code != http.StatusBadRequest || !strings.Contains(body, "at most") {
		t.Fatalf("probe of %d targets: %d %s", probe.MaxTargets+1, code, body)
	}
	// Without --allow-private, loopback is refused and nothing connects,
	// one target or several.
	before := target.conn.get()
	strict := startRelayd(t)
	if code, body := get(strict, "/v1/probe?target="+target.addr(), ""); code != http.StatusForbidden {
		t.Fatalf("probe of loopback on a default relay: %d %s", code, body)
	}
	code, body = get(strict, "/v1/probe?target="+target.addr()+"&target="+target.addr(), "")
	batch.Results = nil
	if err := json.Unmarshal([]byte(body), &batch); code != 200 || err != nil || len(batch.Results) != 2 ||
		batch.Results[0].Summary != nil || batch.Results[1].Summary != nil || !strings.Contains(batch.Results[0].Error, "target ") {
		t.Fatalf("probe of loopback twice on a default relay: %d %s", code, body)
	}
	// With info=1 the answer carries the relay's /v1/info, and a refused
	// target is an error in its result, not the request's status: the
	// info still comes.
	var withInfo struct {
		Results []struct{ Error string }
		Info    struct {
			Limits struct {
				TCPRmemMaxBytes int64 `json:"tcp_rmem_max_bytes"`
			}
		}
	}
	code, body = get(strict, "/v1/probe?info=1&target="+target.addr(), "")
	if err := json.Unmarshal([]byte(body), &withInfo); code != 200 || err != nil || len(withInfo.Results) != 1 ||
		!strings.Contains(withInfo.Results[0].Error, "target ") || withInfo.Info.Limits.TCPRmemMaxBytes <= 0 {
		t.Fatalf("probe of loopback with info=1 on a default relay: %d %s", code, body)
	}
	if n := target.conn.get() - before; n != 0 {
		t.Fatalf("the denied probe reached the target %d times", n)
	}
	code, body = get(open, "/v1/probe?info=1&count=1&target="+target.addr(), "e2e-admin-token-0123")
	res.Summary.Samples = 0
	if err := json.Unmarshal([]byte(body), &withInfo); code != 200 || err != nil || withInfo.Info.Limits.TCPRmemMaxBytes <= 0 ||
		json.Unmarshal([]byte(body), &res) != nil || res.Summary.Samples != 1 {
		t.Fatalf("probe with info=1: %d %s", code, body)
	}
	if code, body := get(open, "/v1/probe?info=yes&target="+target.addr(), "e2e-admin-token-0123"); code != http.StatusBadRequest || !strings.Contains(body, "info: want 1") {
		t.Fatalf("probe info=yes: %d %s", code, body)
	}
	// /v1/info reports the relay's socket limits.
	_, body = get(open, "/v1/info", "e2e-admin-token-0123")
	if !strings.Contains(body, `"tcp_rmem_max_bytes"`) || !strings.Contains(body, `"congestion_control"`) {
		t.Fatalf("info: %s", body)
	}
}
