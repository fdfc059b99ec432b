package topology

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/relaymesh/relaymesh/pkg/nexthop"
)

const labDir = "../../../configs/lab"

// example is the schema example from the package contract.
const example = `
name: split2
defaults: {sysctl: {net.ipv4.tcp_congestion_control: cubic}}
nodes:
  client: {sysctl: {net.ipv4.tcp_rmem: "4096 262144 262144"}}
  r1:     {role: relay, region: osaka, sysctl: {net.ipv4.tcp_rmem: "4096 262144 262144"}}
  server: {role: server, region: tokyo}
links:
  - {between: [client, server], rtt_ms: 50}
  - {between: [client, r1], rtt_ms: 25, rate_mbit: 1000, loss: 0.0, queue_kb: 256}
  - {between: [r1, server], rtt_ms: 25}
`

// base is a minimal valid topology the table cases append to.
const base = `name: t
nodes:
  client: {}
  r1: {role: relay, region: r-one}
  r2: {role: relay}
  r3: {role: relay}
  server: {role: server, region: tokyo}
`

func TestParseExample(t *testing.T) {
	topo, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := topo.NodeNames(), []string{"client", "r1", "server"}; !reflect.DeepEqual(got, want) {
		t.Errorf("NodeNames = %v, want %v", got, want)
	}
	if got, want := topo.Relays(), []string{"r1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Relays = %v, want %v", got, want)
	}
	if got, want := topo.Servers(), []string{"server"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Servers = %v, want %v", got, want)
	}
	sc := topo.Sysctls("r1")
	if sc["net.ipv4.tcp_congestion_control"] != "cubic" || sc["net.ipv4.tcp_rmem"] != "4096 262144 262144" {
		t.Errorf("Sysctls(r1) = %v", sc)
	}
	if sc := topo.Sysctls("server"); len(sc) != 1 || sc["net.ipv4.tcp_congestion_control"] != "cubic" {
		t.Errorf("Sysctls(server) = %v", sc)
	}
	l := topo.Links[1]
	if l.RateMbit != 1000 || l.QueueKB != 256 || l.Between != [2]string{"client", "r1"} {
		t.Errorf("link 1 = %+v", l)
	}
	if ab, ba := l.OneWayNs(); ab != 12_500_000 || ba != 12_500_000 {
		t.Errorf("OneWayNs = %d, %d", ab, ba)
	}
	if n, ok := topo.NodeForRegion("tokyo"); !ok || n != "server" {
		t.Errorf("NodeForRegion(tokyo) = %q, %v", n, ok)
	}
	if n, ok := topo.NodeForRegion("osaka"); !ok || n != "r1" {
		t.Errorf("NodeForRegion(osaka) = %q, %v", n, ok)
	}
	if n, ok := topo.NodeForRegion("mars"); ok || n != "" {
		t.Errorf("NodeForRegion(mars) = %q, %v", n, ok)
	}
}

func TestParseGood(t *testing.T) {
	cases := []struct {
		name, yaml string
		check      func(*Topology) bool
	}{
		{"minimal", "name: a\nnodes: {client: {}}", func(t *Topology) bool { return len(t.Nodes) == 1 && len(t.Links) == 0 }},
		{"null node", "name: a\nnodes:\n  client:\n", func(t *Topology) bool { return t.Nodes["client"] != nil }},
		{"role client", "name: a\nnodes: {client: {role: client}}", func(t *Topology) bool { return t.Nodes["client"].Role == "client" }},
		{"name digits and dash", "name: 0-lab-123456789a\nnodes: {client: {}}", func(t *Topology) bool { return true }},
		{"delay_ms no rtt", base + "links: [{between: [client, r1], delay_ms: [10, 30]}]", func(t *Topology) bool {
			ab, ba := t.Links[0].OneWayNs()
			return ab == 10_000_000 && ba == 30_000_000
		}},
		{"delay_ms with rtt", base + "links: [{between: [client, r1], rtt_ms: 40, delay_ms: [10, 30]}]", func(*Topology) bool { return true }},
		{"delay_ms decimal sum", base + "links: [{between: [client, r1], rtt_ms: 16.667, delay_ms: [8.3335, 8.3335]}]", func(*Topology) bool { return true }},
		{"odd ns split", base + "links: [{between: [client, r1], rtt_ms: 16.667}]", func(t *Topology) bool {
			ab, ba := t.Links[0].OneWayNs()
			return ab == 8_333_500 && ba == 8_333_500 && ab+ba == 16_667_000
		}},
		{"odd ns split uneven", base + "links: [{between: [client, r1], rtt_ms: 0.000001}]", func(t *Topology) bool {
			ab, ba := t.Links[0].OneWayNs()
			return ab == 0 && ba == 1
		}},
		{"all link fields", base + "links: [{between: [r1, r2], rtt_ms: 0, rate_mbit: 10.5, loss: 0.999, queue_kb: 0, jitter_ms: 3}]", func(t *Topology) bool {
			return t.Links[0].Loss == 0.999 && t.Links[0].JitterMs == 3
		}},
		{"next chain", base + "  r4: {role: relay, next: [r1, r2, r3], next_protocol: http}\n", func(t *Topology) bool {
			return reflect.DeepEqual(t.Nodes["r4"].Next, []string{"r1", "r2", "r3"}) && t.Nodes["r4"].NextProtocol == "http"
		}},
		{"next dag", strings.Replace(base, "r1: {role: relay, region: r-one}", "r1: {role: relay, next: [r2, r3]}", 1) +
			"  r4: {role: relay, next: [r2], next_protocol: socks5}\n", func(*Topology) bool { return true }},
		{"sysctl node wins", "name: a\ndefaults: {sysctl: {net.core.rmem_max: '1', net.ipv4.tcp_ecn: 1}}\nnodes: {client: {sysctl: {net.core.rmem_max: '2'}}}",
			func(t *Topology) bool {
				s := t.Sysctls("client")
				return s["net.core.rmem_max"] == "2" && s["net.ipv4.tcp_ecn"] == "1" && t.Defaults.Sysctl["net.core.rmem_max"] == "1"
			}},
		{"unknown node sysctls are defaults", "name: a\ndefaults: {sysctl: {net.core.rmem_max: '1'}}\nnodes: {client: {}}",
			func(t *Topology) bool { return t.Sysctls("nope")["net.core.rmem_max"] == "1" }},
		{"region prefers server", "name: a\nnodes: {client: {region: x}, a: {role: relay, region: x}, z: {role: server, region: x}}",
			func(t *Topology) bool { n, ok := t.NodeForRegion("x"); return ok && n == "z" }},
		{"region any node", "name: a\nnodes: {client: {region: x}, a: {role: relay, region: x}}",
			func(t *Topology) bool { n, ok := t.NodeForRegion("x"); return ok && n == "a" }},
		{"empty region matches nothing", "name: a\nnodes: {client: {}}",
			func(t *Topology) bool { _, ok := t.NodeForRegion(""); return !ok }},
		{"queue_kb whole float", base + "links: [{between: [client, r1], queue_kb: 1e3}]", func(t *Topology) bool { return t.Links[0].QueueKB == 1000 }},
		{"15-char node name", "name: a\nnodes: {client: {}, abcdefghijklmno: {}}", func(*Topology) bool { return true }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topo, err := Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(topo) {
				t.Errorf("check failed: %+v", topo)
			}
		})
	}
}

func TestParseBad(t *testing.T) {
	link := func(s string) string {
		return base + "links:\n  - {between: [client, server], rtt_ms: 50}\n  - " + s + "\n"
	}
	cases := []struct{ name, yaml, want string }{
		{"empty", "", "empty topology"},
		{"two documents", "name: a\nnodes: {client: {}}\n---\nname: b\n", "more than one YAML document"},
		{"not a map", "- a\n- b\n", "cannot unmarshal"},
		{"unknown top key", "name: a\nnodez: {}\n", "field nodez not found"},
		{"unknown node key", "name: a\nnodes: {client: {rol: relay}}", "field rol not found"},
		{"unknown link key", base + "links: [{between: [client, r1], rtt: 5}]", "field rtt not found"},
		{"unknown defaults key", "name: a\ndefaults: {sysctls: {}}\nnodes: {client: {}}", "field sysctls not found"},
		{"duplicate node", "name: a\nnodes:\n  client: {}\n  client: {}\n", "already defined"},
		{"between three", base + "links: [{between: [client, r1, r2]}]", "want 2 elements"},
		{"between one", base + "links: [{between: [client]}]", "want 2 elements"},
		{"name missing", "nodes: {client: {}}", "name: required"},
		{"name upper", "name: Split\nnodes: {client: {}}", `name: "Split" must match`},
		{"name too long", "name: abcdefghijklmnopq\nnodes: {client: {}}", "name: "},
		{"name leading dash", "name: -a\nnodes: {client: {}}", "name: "},
		{"no nodes", "name: a", "nodes: required"},
		{"no client", "name: a\nnodes: {server: {role: server}}", `no node named "client"`},
		{"node name upper", "name: a\nnodes: {client: {}, R1: {}}", `nodes.R1: node name "R1" must match`},
		{"node name digit", "name: a\nnodes: {client: {}, 1r: {}}", "nodes.1r: node name"},
		{"node name too long", "name: a\nnodes: {client: {}, abcdefghijklmnop: {}}", "nodes.abcdefghijklmnop: node name"},
		{"bad role", "name: a\nnodes: {client: {}, r1: {role: relya}}", `nodes.r1.role: "relya" is not one of client, relay, server`},
		{"bad region", "name: a\nnodes: {client: {region: Tokyo}}", `nodes.client.region: "Tokyo" must match`},
		{"region space", "name: a\nnodes: {client: {region: 'new york'}}", "nodes.client.region"},
		{"bad sysctl key", "name: a\nnodes: {client: {sysctl: {vm.swappiness: '1'}}}", `nodes.client.sysctl: key "vm.swappiness"`},
		{"bad sysctl slash", "name: a\nnodes: {client: {sysctl: {net/ipv4/x: '1'}}}", "nodes.client.sysctl: key"},
		{"sysctl dotdot", "name: a\nnodes: {client: {sysctl: {net..x: '1'}}}", "nodes.client.sysctl: key"},
		{"bad defaults sysctl", "name: a\ndefaults: {sysctl: {kernel.x: '1'}}\nnodes: {client: {}}", `defaults.sysctl: key "kernel.x"`},
		{"empty sysctl value", "name: a\nnodes: {client: {sysctl: {net.core.x: ''}}}", "nodes.client.sysctl.net.core.x: empty value"},
		{"multiline sysctl value", "name: a\nnodes: {client: {sysctl: {net.core.x: \"1\\n2\"}}}", "value must be one line"},
		{"next on client", "name: a\nnodes: {client: {next: [r1]}, r1: {role: relay}}", `nodes.client.next: only relays have next`},
		{"next on server", base + "  s2: {role: server, next: [r1]}\n", "nodes.s2.next: only relays"},
		{"next_protocol on server", base + "  s2: {role: server, next_protocol: http}\n", "nodes.s2.next_protocol: only relays"},
		{"next unknown", base + "  r4: {role: relay, next: [r1, r9]}\n", `nodes.r4.next[1]: unknown node "r9"`},
		{"next not relay", base + "  r4: {role: relay, next: [server]}\n", `nodes.r4.next[0]: "server" is not a relay`},
		{"next self", base + "  r4: {role: relay, next: [r4]}\n", `nodes.r4.next[0]: "r4" cannot chain through itself`},
		{"next loop", base + "  r4: {role: relay, next: [r5]}\n  r5: {role: relay, next: [r6]}\n  r6: {role: relay, next: [r4]}\n",
			"nodes.r4.next: relays chain through each other in a loop (r4 -> r5 -> r6 -> r4)"},
		{"next loop via later hop", base + "  r4: {role: relay, next: [r1, r5]}\n  r5: {role: relay, next: [r4]}\n", "in a loop (r4 -> r5 -> r4)"},
		{"bad next_protocol", base + "  r4: {role: relay, next: [r1], next_protocol: socks4}\n", `nodes.r4.next_protocol: "socks4" is not one of socks5, http, relaymesh`},
		{"link unknown node", link("{between: [r1, r9], rtt_ms: 5}"), `links[1].between: unknown node "r9"`},
		{"link empty end", link("{between: [r1, ''], rtt_ms: 5}"), "links[1].between: endpoint 1 is empty"},
		{"link no between", link("{rtt_ms: 5}"), "links[1].between: endpoint 0 is empty"},
		{"link self", link("{between: [r1, r1]}"), `links[1].between: both ends are "r1"`},
		{"link duplicate", link("{between: [client, server], rtt_ms: 10}"), "links[1].between: duplicate of links[0]"},
		{"link duplicate reversed", link("{between: [server, client], rtt_ms: 10}"), "links[1].between: duplicate of links[0] (client, server)"},
		{"rtt negative", link("{between: [r1, r2], rtt_ms: -1}"), "links[1].rtt_ms: -1 must be >= 0"},
		{"rtt too big", link("{between: [r1, r2], rtt_ms: 10000}"), "links[1].rtt_ms"},
		{"rtt nan", link("{between: [r1, r2], rtt_ms: .nan}"), "links[1].rtt_ms: NaN"},
		{"rtt inf", link("{between: [r1, r2], rtt_ms: .inf}"), "links[1].rtt_ms: +Inf"},
		{"delay one entry", link("{between: [r1, r2], delay_ms: [5]}"), "links[1].delay_ms: want 2 entries"},
		{"delay three entries", link("{between: [r1, r2], delay_ms: [5, 5, 5]}"), "links[1].delay_ms: want 2 entries"},
		{"delay empty list", link("{between: [r1, r2], delay_ms: []}"), "links[1].delay_ms: want 2 entries"},
		{"delay negative", link("{between: [r1, r2], delay_ms: [-1, 5]}"), "links[1].delay_ms[0]"},
		{"delay nan", link("{between: [r1, r2], delay_ms: [1, .nan]}"), "links[1].delay_ms[1]"},
		{"delay sum too big", link("{between: [r1, r2], delay_ms: [6000, 6000]}"), "links[1].delay_ms: sum"},
		{"delay rtt mismatch", link("{between: [r1, r2], rtt_ms: 20, delay_ms: [5, 5]}"), "links[1].rtt_ms: 20 must be 0 or the sum of delay_ms (10)"},
		{"rate negative", link("{between: [r1, r2], rate_mbit: -1}"), "links[1].rate_mbit"},
		{"rate inf", link("{between: [r1, r2], rate_mbit: .inf}"), "links[1].rate_mbit"},
		{"rate nan", link("{between: [r1, r2], rate_mbit: .nan}"), "links[1].rate_mbit"},
		{"loss one", link("{between: [r1, r2], loss: 1}"), "links[1].loss: 1 must be in [0, 1)"},
		{"loss negative", link("{between: [r1, r2], loss: -0.1}"), "links[1].loss"},
		{"loss nan", link("{between: [r1, r2], loss: .nan}"), "links[1].loss"},
		{"queue negative", link("{between: [r1, r2], queue_kb: -1}"), "links[1].queue_kb: -1 must be >= 0"},
		{"queue float", link("{between: [r1, r2], queue_kb: 1.5}"), "links[1].queue_kb: 1.5 is not a whole number"},
		{"jitter negative", link("{between: [r1, r2], jitter_ms: -2}"), "links[1].jitter_ms"},
		{"jitter inf", link("{between: [r1, r2], jitter_ms: .inf}"), "links[1].jitter_ms"},
		{"rtt string", link("{between: [r1, r2], rtt_ms: fast}"), "cannot unmarshal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestTooManyNodes(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: big\nnodes:\n  client: {}\n")
	for i := 0; i < MaxNodes; i++ {
		b.WriteString("  n" + strconv.Itoa(i) + ": {}\n")
	}
	_, err := Parse([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "nodes: 201 nodes, at most 200") {
		t.Fatalf("got %v", err)
	}
}

// Every problem is reported, not just the first.
func TestValidateReportsAll(t *testing.T) {
	_, err := Parse([]byte("name: X\nnodes: {r1: {role: relya}}\nlinks: [{between: [r1, r9], loss: 2}]"))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"name: ", `no node named "client"`, "nodes.r1.role", `links[0].between: unknown node "r9"`, "links[0].loss"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// Validate and the accessors cope with a hand-built topology holding nil nodes.
func TestNilNode(t *testing.T) {
	topo := &Topology{Name: "a", Nodes: map[string]*Node{"client": nil, "r1": {Role: RoleRelay, Next: []string{"client"}}}}
	err := topo.Validate()
	if err == nil || !strings.Contains(err.Error(), `nodes.r1.next[0]: "client" is not a relay`) {
		t.Fatalf("got %v", err)
	}
	if s := topo.Sysctls("client"); s == nil || len(s) != 0 {
		t.Errorf("Sysctls = %v", s)
	}
	if r := topo.Relays(); !reflect.DeepEqual(r, []string{"r1"}) {
		t.Errorf("Relays = %v", r)
	}
	if _, ok := topo.NodeForRegion("x"); ok {
		t.Error("NodeForRegion found a region")
	}
}

func TestOneWayNsUnvalidated(t *testing.T) {
	for _, l := range []Link{{RTTMs: -5}, {DelayMs: []float64{-1, -1}}, {RTTMs: 1e300}} {
		ab, ba := l.OneWayNs()
		if ab < 0 || ba < 0 {
			t.Errorf("%+v: %d, %d", l, ab, ba)
		}
	}
}

func TestLoadErrorsNamePath(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(p, []byte("name: a\nnodes: {client: {role: x}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.HasPrefix(err.Error(), p+": ") || !strings.Contains(err.Error(), "nodes.client.role") {
		t.Errorf("got %v", err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("got %v", err)
	}
}

func shipped(t testing.TB) []string {
	files, err := filepath.Glob(filepath.Join(labDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no topology files in %s", labDir)
	}
	return files
}

func TestShippedFiles(t *testing.T) {
	names := map[string]string{}
	for _, f := range shipped(t) {
		topo, err := Load(f)
		if err != nil {
			t.Error(err)
			continue
		}
		base := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if topo.Name != base {
			t.Errorf("%s: name %q, want the file name %q", f, topo.Name, base)
		}
		if prev, dup := names[topo.Name]; dup {
			t.Errorf("%s: name %q also used by %s", f, topo.Name, prev)
		}
		names[topo.Name] = f
		if len(topo.Servers()) == 0 {
			t.Errorf("%s: no server node", f)
		}
		if topo.Sysctls(ClientNode)["net.ipv4.tcp_congestion_control"] != "cubic" {
			t.Errorf("%s: client congestion control is not cubic", f)
		}
		if len(topo.Links) > 40 {
			t.Errorf("%s: %d links, keep under ~40 (2 emulator threads each)", f, len(topo.Links))
		}
	}
}

// The split and sweep files are a 50 ms client-server RTT however it is cut.
func TestShippedSplits(t *testing.T) {
	for _, f := range shipped(t) {
		base := filepath.Base(f)
		if !strings.HasPrefix(base, "split") && !strings.HasPrefix(base, "sweep-") {
			continue
		}
		topo, err := Load(f)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, n := range topo.NodeNames() {
			if got := topo.Sysctls(n)["net.ipv4.tcp_rmem"]; got != "4096 262144 262144" {
				t.Errorf("%s: node %s tcp_rmem %q", f, n, got)
			}
		}
		// Walk client -> r1 -> ... -> server along the relays' order.
		rtt := map[[2]string]float64{}
		for _, l := range topo.Links {
			rtt[l.Between] = l.RTTMs
			rtt[[2]string{l.Between[1], l.Between[0]}] = l.RTTMs
		}
		if d := rtt[[2]string{"client", "server"}]; d != 50 {
			t.Errorf("%s: direct client-server rtt %v, want 50", f, d)
		}
		path := append(append([]string{"client"}, topo.Relays()...), "server")
		if len(path) == 2 {
			continue
		}
		var sum float64
		for i := 0; i+1 < len(path); i++ {
			d, ok := rtt[[2]string{path[i], path[i+1]}]
			if !ok {
				t.Errorf("%s: no link %s-%s", f, path[i], path[i+1])
			}
			sum += d
		}
		if sum < 49.99 || sum > 50.01 {
			t.Errorf("%s: relayed path rtt %v, want 50", f, sum)
		}
		if len(topo.Links) != len(path) {
			t.Errorf("%s: %d links, want %d", f, len(topo.Links), len(path))
		}
		relays := topo.Relays()
		// Hop by hop: each relay's next is only its successor, which in turn
		// has its own next (relayd dials its next list as one nested chain).
		for i, r := range relays {
			if want := relays[i+1 : min(i+2, len(relays))]; len(topo.Nodes[r].Next) != len(want) || (len(want) > 0 && !reflect.DeepEqual(topo.Nodes[r].Next, want)) {
				t.Errorf("%s: %s next %v, want %v", f, r, topo.Nodes[r].Next, want)
			}
		}
	}
}

func TestWorld(t *testing.T) {
	topo, err := Load(filepath.Join(labDir, "world.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(topo.Relays()); n != 7 {
		t.Errorf("%d relays, want 7", n)
	}
	for _, region := range []string{"tokyo", "singapore", "virginia"} {
		if n, ok := topo.NodeForRegion(region); !ok || n != "srv-"+region {
			t.Errorf("NodeForRegion(%s) = %q, %v", region, n, ok)
		}
	}
	linked := map[[2]string]bool{}
	for _, l := range topo.Links {
		linked[l.Between] = true
		linked[[2]string{l.Between[1], l.Between[0]}] = true
	}
	relays := topo.Relays()
	for i, a := range relays {
		if !linked[[2]string{ClientNode, a}] {
			t.Errorf("no client-%s link", a)
		}
		for _, b := range relays[i+1:] {
			if !linked[[2]string{a, b}] {
				t.Errorf("relay mesh lacks %s-%s", a, b)
			}
		}
	}
	for _, s := range topo.Servers() {
		if !linked[[2]string{ClientNode, s}] {
			t.Errorf("no direct client-%s link", s)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, p := range shipped(f) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(example))
	f.Add([]byte(base + "  r4: {role: relay, next: [r1, r5]}\n  r5: {role: relay, next: [r4]}\n"))
	f.Add([]byte(base + "links: [{between: [client, r1], rtt_ms: .nan, delay_ms: [1, .inf]}]"))
	f.Add([]byte("name: a\nnodes:\n  client:\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		topo, err := Parse(data)
		if err != nil {
			return
		}
		// A topology that parsed is valid and its accessors hold up.
		if err := topo.Validate(); err != nil {
			t.Fatalf("Parse accepted an invalid topology: %v", err)
		}
		for _, n := range topo.NodeNames() {
			topo.Sysctls(n)
			if r := topo.Nodes[n].Region; r != "" {
				if _, ok := topo.NodeForRegion(r); !ok {
					t.Fatalf("region %q of %s not found", r, n)
				}
			}
		}
		for _, l := range topo.Links {
			if ab, ba := l.OneWayNs(); ab < 0 || ba < 0 {
				t.Fatalf("negative delay %d %d", ab, ba)
			}
		}
		topo.Relays()
		topo.Servers()
	})
}

func TestRouteFollowsOnwardNext(t *testing.T) {
	top := &Topology{Nodes: map[string]*Node{
		"client": {},
		"r1":     {Role: RoleRelay, Next: []string{"r2"}},
		"r2":     {Role: RoleRelay, Next: []string{"r3"}},
		"r3":     {Role: RoleRelay},
		"r4":     {Role: RoleRelay, Next: []string{"r2", "r3"}},
		"loop":   {Role: RoleRelay, Next: []string{"loop2"}},
		"loop2":  {Role: RoleRelay, Next: []string{"loop"}},
	}}
	for name, want := range map[string][]string{
		"r1": {"r2", "r3"}, "r2": {"r3"}, "r3": nil, "r4": {"r2", "r3"}, "client": nil, "loop": {"loop2"},
	} {
		if got := top.Route(name); !reflect.DeepEqual(got, want) {
			t.Errorf("Route(%s) = %v, want %v", name, got, want)
		}
	}
}

// next_protocol takes any hop scheme relayd serves, by name or alias, and
// defaults to relaymesh.
func TestNextProtocolIsAHopScheme(t *testing.T) {
	for _, s := range nexthop.Schemes() {
		if s.Listener == "" {
			continue
		}
		for _, name := range append([]string{s.Name}, s.Aliases...) {
			topo, err := Parse([]byte(base + "  r4: {role: relay, next: [r1], next_protocol: " + name + "}\n"))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got, ok := topo.Nodes["r4"].NextScheme(); !ok || got.Name != s.Name {
				t.Errorf("%s: NextScheme %q %v, want %s", name, got.Name, ok, s.Name)
			}
		}
	}
	if got, ok := (&Node{}).NextScheme(); !ok || got.Name != nexthop.Relaymesh {
		t.Errorf("default: %q %v, want %s", got.Name, ok, nexthop.Relaymesh)
	}
}
