package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/relaymesh/relaymesh/pkg/registry/consultest"
)

// adminRequest GETs path from r's admin API with the admin token ("":
// none), and returns the status and the body.
func adminRequest(t *testing.T, r *relayd, path, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+r.admin+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// adminGet is adminRequest for an answer that must be 200 OK.
func adminGet(t *testing.T, r *relayd, path, token string) string {
	t.Helper()
	code, body := adminRequest(t, r, path, token)
	if code != http.StatusOK {
		t.Fatalf("%s%s: %d\n%s", r.admin, path, code, body)
	}
	return body
}

// metricSum sums the samples of the metric name (every label value) in a
// /metrics page.
func metricSum(page, name string) float64 {
	var sum float64
	for _, line := range strings.Split(page, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		if n, _, _ := strings.Cut(strings.Fields(line)[0], "{"); n == name {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}

type coordsOut struct {
	Relay       string
	Coordinates []struct {
		Relay string
		Coord struct{ Vec []float64 }
		AgeS  float64 `json:"age_s"`
	}
}

// TestFleetCoordinatesMode: four relays in probe mode coordinates on a
// fleet file, with a fast budget (600 handshakes a minute instead of 12):
// each measures its peers within the budget, every relay's coordinate is
// published and reaches every other (/v1/measurements?scope=fleet), and
// relayctl rtt shows the matrix they measured.
func TestFleetCoordinatesMode(t *testing.T) {
	dir := t.TempDir()
	fleetPath := filepath.Join(dir, "fleet.yaml")
	const token = "e2e-token-0123456789"
	const perMinute = 600 // one probe every 100 ms
	relays := []*fleetRelay{{name: "a", admin: freeAddr(t)}, {name: "b", admin: freeAddr(t)}, {name: "c", admin: freeAddr(t)}, {name: "d", admin: freeAddr(t)}}
	writeFleetFile(t, fleetPath, token, relays)
	start := time.Now()
	for _, fr := range relays {
		cfg := filepath.Join(dir, fr.name+".yaml")
		body := fmt.Sprintf("probe: {mode: coordinates, per_minute: %d, timeout: 1s, pull_interval: 300ms}\nfleet: %s\n", perMinute, fleetPath)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		fr.r = startRelayd(t, "--config", cfg, "--name", fr.name, "--admin", fr.admin, "--admin-token", token, "--allow-private",
			"--fleet-secret-file", fleetSecretFile(t))
	}

	// Every relay knows all four coordinates: each published its own, and
	// pulled the others'.
	deadline := time.Now().Add(20 * time.Second)
	for _, fr := range relays {
		for {
			var m coordsOut
			body := adminGet(t, fr.r, "/v1/measurements?scope=fleet", token)
			if err := json.Unmarshal([]byte(body), &m); err != nil {
				t.Fatalf("%s: %v\n%s", fr.name, err, body)
			}
			known := map[string]bool{}
			for _, c := range m.Coordinates {
				if len(c.Coord.Vec) == 8 && c.AgeS >= 0 && c.AgeS < 5 {
					known[c.Relay] = true
				}
			}
			if len(known) == 4 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s knows the coordinates of %v, want a, b, c and d:\n%s", fr.name, known, body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// scope=coordinates, what relays in this mode read of the fleet once a
	// minute: every coordinate, no pair.
	var cm struct {
		coordsOut
		Pairs []json.RawMessage
	}
	_ = json.Unmarshal([]byte(adminGet(t, relays[0].r, "/v1/measurements?scope=coordinates", token)), &cm)
	if len(cm.Coordinates) != 4 || len(cm.Pairs) != 0 {
		t.Errorf("scope=coordinates: %d coordinates and %d pairs, want 4 and none", len(cm.Coordinates), len(cm.Pairs))
	}
	// Each relay's own scope carries its own coordinate only.
	for _, fr := range relays {
		var m coordsOut
		_ = json.Unmarshal([]byte(adminGet(t, fr.r, "/v1/measurements", token)), &m)
		if len(m.Coordinates) != 1 || m.Coordinates[0].Relay != fr.name {
			t.Errorf("%s's own measurements carry coordinates %+v, want its own", fr.name, m.Coordinates)
		}
	}

	// The probe set holds the whole fleet of 3 peers, so relayctl sees the
	// full matrix, measured.
	waitRTT(t, fleetPath, func(m rttOut) bool {
		ok := 0
		for _, p := range m.Pairs {
			if p.Loss == 0 && p.Samples >= 3 && p.RTTMs > 0 && p.RTTMs < 50 && !p.Estimated {
				ok++
			}
		}
		return ok == 12
	})

	for _, fr := range relays {
		page := adminGet(t, fr.r, "/metrics", token)
		if up := metricSum(page, "relaymesh_coordinate_updates_total"); up == 0 {
			t.Errorf("%s: its coordinate never moved", fr.name)
		}
		if size := metricSum(page, "relaymesh_probe_set_size"); size != 3 {
			t.Errorf("%s: relaymesh_probe_set_size %v, want its 3 peers", fr.name, size)
		}
		// Within budget: one probe at start, then at most one an interval.
		probes := metricSum(page, "relaymesh_probes_total")
		if most := float64(time.Since(start)/(time.Minute/perMinute)) + 1; probes == 0 || probes > most {
			t.Errorf("%s: %v probes in %v, want some and at most the budget's %v", fr.name, probes, time.Since(start).Round(time.Millisecond), most)
		}
	}
}

// TestConsulCoordinatesMode: three relays in probe mode coordinates on
// Consul: each writes its coordinate to relaymesh/coordinates/<relay>,
// reads everyone's back (within the 10 s the relays' coordinates are read
// at most every), relayctl sees the matrix they measured, and a relay that
// stops deletes its key.
func TestConsulCoordinatesMode(t *testing.T) {
	agent := consultest.Start(t, "../bin/consul")
	client, err := api.NewClient(&api.Config{Address: agent.HTTP})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	names := []string{"a", "b", "c"}
	relays := map[string]*relayd{}
	for _, n := range names {
		cfg := filepath.Join(dir, n+".yaml")
		body := fmt.Sprintf("probe: {mode: coordinates, per_minute: 600, timeout: 1s, pull_interval: 300ms}\nconsul: {addr: %s}\n", agent.HTTP)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		relays[n] = startRelayd(t, "--config", cfg, "--name", n, "--allow-private")
	}
	deadline := time.Now().Add(25 * time.Second)
	for _, n := range names {
		for {
			var m coordsOut
			body := adminGet(t, relays[n], "/v1/measurements?scope=fleet", "")
			if err := json.Unmarshal([]byte(body), &m); err != nil {
				t.Fatalf("%s: %v\n%s", n, err, body)
			}
			if len(m.Coordinates) == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s knows %d coordinates, want 3:\n%s", n, len(m.Coordinates), body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for _, n := range names {
		kv, _, err := client.KV().Get("relaymesh/coordinates/"+n, nil)
		if err != nil || kv == nil || !strings.Contains(string(kv.Value), `"relay":"`+n+`"`) {
			t.Fatalf("relaymesh/coordinates/%s: %v %v", n, kv, err)
		}
	}
	for {
		var m rttOut
		relayctlJSON(t, &m, "rtt", "--consul", agent.HTTP, "-o", "json")
		ok := 0
		for _, p := range m.Pairs {
			if !p.Estimated && p.Loss == 0 && p.Samples >= 3 && p.RTTMs > 0 && p.RTTMs < 50 {
				ok++
			}
		}
		if ok == 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relayctl rtt: %d of 6 pairs measured: %+v", ok, m)
		}
		time.Sleep(200 * time.Millisecond)
	}
	relays["c"].stop(t)
	if kv, _, err := client.KV().Get("relaymesh/coordinates/c", nil); err != nil || kv != nil {
		t.Fatalf("c stopped and its coordinate stays: %v %v", kv, err)
	}

	// d joins. a reads the relays seldom (every 10 s at this size), but
	// forwards to d (?via=d) as soon as d is registered: it reads d alone.
	cfg := filepath.Join(dir, "d.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("probe: {mode: coordinates, per_minute: 600, timeout: 1s}\nconsul: {addr: %s}\n", agent.HTTP)), 0o600); err != nil {
		t.Fatal(err)
	}
	startRelayd(t, "--config", cfg, "--name", "d", "--allow-private")
	var info struct{ Name string }
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, body := adminRequest(t, relays["a"], "/v1/info?via=d", "")
		if code == http.StatusOK {
			if err := json.Unmarshal([]byte(body), &info); err != nil || info.Name != "d" {
				t.Fatalf("a's /v1/info?via=d: %v %s", err, body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's /v1/info?via=d within 5 s of d's start: %d %s", code, body)
		}
	}
}

// coordinatesFleet is a fleet file's relays named names, in probe mode
// coordinates on loopback, over TLS links, each started with extra flags.
type coordinatesFleet struct {
	path   string // the fleet file
	token  string
	relays []*relayd
}

func startCoordinatesFleet(t *testing.T, names []string, extra ...string) *coordinatesFleet {
	t.Helper()
	return startCoordinatesFleetWith(t, names, func(string) []string { return extra })
}

// startCoordinatesFleetWith is startCoordinatesFleet with each relay's
// extra relayd flags from extra (by its name).
func startCoordinatesFleetWith(t *testing.T, names []string, extra func(name string) []string) *coordinatesFleet {
	t.Helper()
	dir := t.TempDir()
	f := &coordinatesFleet{path: filepath.Join(dir, "fleet.yaml"), token: "e2e-token-0123456789"}
	admins, relayAddrs := map[string]string{}, map[string]string{}
	var b strings.Builder
	fmt.Fprintf(&b, "admin_token: %s\nrelays:\n", f.token)
	for _, n := range names {
		admins[n], relayAddrs[n] = freeAddr(t), freeAddr(t)
		fmt.Fprintf(&b, "  - {name: %s, region: reg-%s, admin: %s, relay: %s}\n", n, n, admins[n], relayAddrs[n])
	}
	if err := os.WriteFile(f.path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	secret := fleetSecretFile(t)
	for _, n := range names {
		cfg := filepath.Join(dir, n+".yaml")
		body := fmt.Sprintf("probe: {mode: coordinates, per_minute: 600, timeout: 1s, pull_interval: 300ms}\nfleet: %s\n", f.path)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"--config", cfg, "--name", n, "--admin", admins[n], "--admin-token", f.token, "--allow-private",
			"--relay-listen", relayAddrs[n], "--fleet-secret-file", secret}, extra(n)...)
		f.relays = append(f.relays, startRelayd(t, args...))
	}
	return f
}

// udpAnswered sums the probe asks over UDP the relays answered (relayd
// admin_udp).
func (f *coordinatesFleet) udpAnswered(t *testing.T) float64 {
	t.Helper()
	sum := 0.0
	for _, r := range f.relays {
		page := adminGet(t, r, "/metrics", f.token)
		for _, line := range strings.Split(page, "\n") {
			if strings.HasPrefix(line, `relaymesh_udp_asks_total{result="answered"} `) {
				var v float64
				fmt.Sscan(strings.Fields(line)[1], &v)
				sum += v
			}
		}
	}
	return sum
}

type planJSON struct {
	Chain []string `json:"chain"`
	Notes []string `json:"notes"`
}

// shortlistOnce plans to dst with args until the plan shortlists over
// all n relays (each must have published a coordinate first), for up to
// 20 s.
func (f *coordinatesFleet) shortlistOnce(t *testing.T, dst string, n int, args ...string) planJSON {
	t.Helper()
	var out planJSON
	deadline := time.Now().Add(20 * time.Second)
	for {
		// Until every relay has published a coordinate, the plan fails
		// and says so.
		got, err := relayctlCmd(t, append([]string{"plan", "--fleet", f.path, "--dst", dst, "--survey", "shortlist", "-o", "json"}, args...)...).Output()
		notes := ""
		if err == nil {
			if err := json.Unmarshal(got, &out); err != nil {
				t.Fatalf("%v\n%s", err, got)
			}
			notes = strings.Join(out.Notes, "\n")
			if strings.Contains(notes, fmt.Sprintf("shortlist: planned over %d of %d relays", n, n)) {
				return out
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no shortlist over the %d relays in 20 s: %v; notes:\n%s", n, err, notes)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestPlanShortlistsACoordinatesFleet: relayctl plan on a fleet whose
// relays publish coordinates (probe mode coordinates) surveys by
// shortlist: the landmarks and candidates are asked through their real
// admin APIs (/v1/probe, /v1/info), the plan comes back, and its notes say
// what the shortlist measured. On loopback every RTT is tiny, so the plan
// itself is not the point; the path through the binaries is.
func TestPlanShortlistsACoordinatesFleet(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e"}
	fl := startCoordinatesFleet(t, names)
	fleetPath := fl.path
	// Its relays' first probes were asked over UDP, and each acknowledged.
	// On a machine busy with other tests (two cores, the race detector)
	// an acknowledgement can come after the HTTPS read beside its ask,
	// and the plan rightly asks that relay over HTTPS instead; or a round
	// ends at its quorum with that relay's answer still on its way: up
	// to three plans, the last of which must have had every ask
	// acknowledged and one answered over UDP at least.
	ackedPlan := func(dst string, args ...string) planJSON {
		t.Helper()
		var out planJSON
		for try := 1; try <= 3; try++ {
			before := fl.udpAnswered(t)
			out = fl.shortlistOnce(t, dst, len(names), args...)
			answered := fl.udpAnswered(t) - before
			t.Logf("plan to %s %v, %v asks answered over UDP; notes %q", dst, out.Chain, answered, out.Notes)
			if answered > 0 && !strings.Contains(strings.Join(out.Notes, "\n"), "over UDP did not acknowledge") {
				break
			}
		}
		return out
	}
	out := ackedPlan("reg-e")
	before := fl.udpAnswered(t)
	if before == 0 || strings.Contains(strings.Join(out.Notes, "\n"), "over UDP did not acknowledge") {
		t.Errorf("%v asks over UDP answered; notes %q: want the plans' first probes asked over UDP", before, out.Notes)
	}
	// To a host:port, with two landmarks: they are asked to probe it
	// over UDP with the HTTPS connection opening beside (until an ask is
	// acknowledged), and the other relays of the first cut over UDP
	// alone, their windows coming with the reply (the plan describes
	// every relay it holds: none is unknown), this host's probe of each
	// being the ask's acknowledgement (none is left out unreached).
	dst := startServer(t, func(c net.Conn) { c.Close() })
	out = ackedPlan(dst.addr(), "--shortlist-landmarks", "2")
	notes := strings.Join(out.Notes, "\n")
	if got := fl.udpAnswered(t) - before; got < float64(len(names)) || strings.Contains(notes, "over UDP did not acknowledge") || strings.Contains(notes, "window unknown") || strings.Contains(notes, "left out") {
		t.Errorf("a plan to a host:port: %v asks over UDP answered, want one for each of the %d relays at least; notes %q", got, len(names), out.Notes)
	}
	before = fl.udpAnswered(t)
	// --udp-ask=false asks over HTTPS only.
	relayctlJSON(t, &out, "plan", "--fleet", fleetPath, "--dst", "reg-e", "--survey", "shortlist", "--udp-ask=false", "-o", "json")
	if after := fl.udpAnswered(t); after != before {
		t.Errorf("--udp-ask=false: asks over UDP answered went from %v to %v", before, after)
	}
	// relayctl nodes shows each relay's coordinate and its age.
	var nodes struct {
		Relays []struct {
			Name           string
			Coordinate     *struct{ Vec []float64 }
			CoordinateAgeS *float64 `json:"coordinate_age_s"`
		}
	}
	relayctlJSON(t, &nodes, "nodes", "--fleet", fleetPath, "-o", "json")
	for _, r := range nodes.Relays {
		if r.Coordinate == nil || len(r.Coordinate.Vec) != 8 || r.CoordinateAgeS == nil || *r.CoordinateAgeS > 10 {
			t.Errorf("relayctl nodes: %s has coordinate %+v, age %v; want its 8-dimensional coordinate, fresh", r.Name, r.Coordinate, r.CoordinateAgeS)
		}
	}
	if len(nodes.Relays) != len(names) {
		t.Errorf("relayctl nodes lists %d relays, want %d", len(nodes.Relays), len(names))
	}
	// Full, on the same fleet: no shortlist.
	relayctlJSON(t, &out, "plan", "--fleet", fleetPath, "--dst", "reg-e", "--survey", "full", "-o", "json")
	if strings.Contains(strings.Join(out.Notes, "\n"), "shortlist") {
		t.Errorf("--survey full shortlisted: %q", out.Notes)
	}
}

// Relays that answer no asks over UDP (admin_udp off, as a filtered UDP
// port would) are asked over HTTPS once the connection beside each ask is
// up, and the plan is made as ever, saying how many relays did not
// acknowledge.
func TestPlanAsksOverHTTPSWhenUDPAsksGoUnanswered(t *testing.T) {
	names := []string{"a", "b", "c"}
	fl := startCoordinatesFleet(t, names, "--admin-udp=false")
	out := fl.shortlistOnce(t, "reg-c", len(names))
	t.Logf("plan %v; notes %q", out.Chain, out.Notes)
	if !strings.Contains(strings.Join(out.Notes, "\n"), "over UDP did not acknowledge") {
		t.Errorf("no note of the asks over UDP that went unacknowledged: %q", out.Notes)
	}
	if n := fl.udpAnswered(t); n != 0 {
		t.Errorf("%v asks over UDP answered with admin_udp off", n)
	}
}

// TestNodesChecksUDPAsks: relayctl nodes --check-udp asks every relay in
// one UDP datagram, as plans do, and tells a relay that answers from one
// that does not (here admin_udp off; a filtered port looks the same),
// naming the latter and what to look at.
func TestNodesChecksUDPAsks(t *testing.T) {
	fl := startCoordinatesFleetWith(t, []string{"a", "b"}, func(name string) []string {
		if name == "b" {
			return []string{"--admin-udp=false"}
		}
		return nil
	})
	var out struct {
		Relays []struct {
			Name     string   `json:"name"`
			UDPAsk   string   `json:"udp_ask"`
			UDPAskMs *float64 `json:"udp_ask_ms"`
		} `json:"relays"`
	}
	cmd := relayctlCmd(t, "nodes", "--fleet", fl.path, "--check-udp", "--udp-wait", "1s", "-o", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("relayctl nodes --check-udp: %v\n%s", err, stderr.String())
	}
	if err := json.Unmarshal(got, &out); err != nil {
		t.Fatalf("%v\n%s", err, got)
	}
	asks := map[string]string{}
	for _, r := range out.Relays {
		asks[r.Name] = r.UDPAsk
		if (r.UDPAskMs != nil) != (r.UDPAsk == "answered") {
			t.Errorf("relay %s: udp_ask %q with udp_ask_ms %v", r.Name, r.UDPAsk, r.UDPAskMs)
		}
	}
	if asks["a"] != "answered" || asks["b"] != "no answer" {
		t.Errorf("udp_ask by relay %v, want a answered and b (admin_udp off) no answer", asks)
	}
	if n := fl.udpAnswered(t); n != 1 {
		t.Errorf("the relays counted %v asks over UDP answered, want 1 (a's)", n)
	}
	if msg := stderr.String(); !strings.Contains(msg, "healthy relays that did not answer an ask over UDP in 1s: 1 (b)") {
		t.Errorf("stderr does not name the relay that did not answer:\n%s", msg)
	}
	// The table has the column; without the secret the check says what
	// it needs.
	table, err := relayctlCmd(t, "nodes", "--fleet", fl.path, "--check-udp", "--udp-wait", "1s").Output()
	if err != nil || !strings.Contains(string(table), "UDP ASK") {
		t.Errorf("table: %v\n%s", err, table)
	}
	bare := exec.Command(relayctlBin, "nodes", "--fleet", fl.path, "--check-udp")
	bare.Env = append(os.Environ(), "RELAYMESH_FLEET_SECRET_FILE=")
	if msg, err := bare.CombinedOutput(); err == nil || !strings.Contains(string(msg), "--fleet-secret-file") {
		t.Errorf("--check-udp without the fleet secret: %v\n%s", err, msg)
	}
}
