package planner

import (
	"strings"
	"testing"
)

func TestDiagram(t *testing.T) {
	m, err := ParseMatrix([]byte(exampleMatrix))
	if err != nil {
		t.Fatal(err)
	}
	r := mustSearch(t, m, Request{})
	if got, want := Diagram(r.Best), "client ──12.5 ms──▶ r1 ──30.1 ms──▶ srv"; got != want {
		t.Errorf("Diagram(best) = %q, want %q", got, want)
	}
	if got, want := Diagram(r.Direct), "client ──50.0 ms──▶ srv"; got != want {
		t.Errorf("Diagram(direct) = %q, want %q", got, want)
	}
	if got := Diagram(Plan{}); got != "(not measured)" {
		t.Errorf("Diagram(empty) = %q", got)
	}
}

func TestExplain(t *testing.T) {
	m, err := ParseMatrix([]byte(exampleMatrix))
	if err != nil {
		t.Fatal(err)
	}
	out := Explain(mustSearch(t, m, Request{}))
	for _, want := range []string{
		"plan client → srv (down)\n",
		"best (chain): client ──12.5 ms──▶ r1 ──30.1 ms──▶ srv\n",
		"  predicted ≤ 41.1 Mbit/s (down 41.1 Mbit/s, up 819 Mbit/s), total RTT 42.6 ms, 3.92× direct\n",
		"  #  segment    rtt      window           limit    loss     rate         flags\n",
		"  1  client→r1  12.5 ms  64 KiB (client)  unknown  unknown  41.9 Mbit/s  bottleneck (window)\n",
		"  2  r1→srv     30.1 ms  4 MiB (r1)       unknown  unknown  1.11 Gbit/s  -\n",
		"  - the pick rests on what is not known: it beats direct's prediction only if client→r1, r1→srv each carry at least 11.8 Mbit/s (direct's 10.5 Mbit/s + 10%, before the relays' overhead); direct's prediction is itself a bound\n",
		"  - 1 relay at 2% overhead: 41.9 Mbit/s × 0.980 = 41.1 Mbit/s predicted\n",
		"  - chain via r1 wins: 3.92× direct (41.1 Mbit/s vs 10.5 Mbit/s), a gain of 292% ≥ the 10% minimum\n",
		"first relay placed near the client",
		"direct: client ──50.0 ms──▶ srv  10.5 Mbit/s\n",
		"notes:\n- searched 1 usable relay, chains of up to 1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	for i, line := range strings.Split(out, "\n") {
		if strings.HasSuffix(line, " ") {
			t.Errorf("line %d has trailing space: %q", i+1, line)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{fmtBps(84.2e6), "84.2 Mbit/s"},
		{fmtBps(2.5e9), "2.50 Gbit/s"},
		{fmtBps(950e3), "950 kbit/s"},
		{fmtBps(12), "12.0 bit/s"},
		{fmtMs(12.5), "12.5 ms"},
		{fmtMs(0.25), "0.25 ms"},
		{fmtMs(180), "180 ms"},
		{fmtBytes(64 << 10), "64 KiB"},
		{fmtBytes(3 << 20), "3 MiB"},
		{fmtBytes(1536 << 10), "1.5 MiB"},
		{fmtBytes(1000), "1000 B"},
		{fmtPct(0.042), "4.2%"},
		{fmtPct(0.1), "10%"},
		{fmtPct(0.05), "5%"},
		{fmtPct(2.92), "292%"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestExplainKnownInputs: with every capacity declared and every loss
// learnt, the prediction is a point, and the table says where each figure
// came from.
func TestExplainKnownInputs(t *testing.T) {
	m := &Matrix{
		Nodes: []Node{{Name: "client", WindowBytes: 64 << 10, LimitBps: 100e6}, {Name: "r1", Relay: true, WindowBytes: 4 << 20, LimitBps: 200e6}, {Name: "srv", LimitBps: 1e9}},
		Pairs: []Pair{
			{A: "client", B: "r1", RTTMs: 12.5, ALossSource: LearntFromTunnels, BLossSource: LearntFromTunnels},
			{A: "r1", B: "srv", RTTMs: 30.1, Loss: 0.001, ALossSource: LearntFromTunnels, BLossSource: LearntFromTunnels},
			{A: "client", B: "srv", RTTMs: 50, ALossSource: LossDeclared, BLossSource: LossDeclared},
		},
	}
	out := Explain(mustSearch(t, m, Request{}))
	for _, want := range []string{
		"  predicted 14.6 Mbit/s (down",
		"  1  client→r1  12.5 ms  64 KiB (client)  100 Mbit/s declared  0% (tunnels)    41.9 Mbit/s  -\n",
		"  2  r1→srv     30.1 ms  4 MiB (r1)       200 Mbit/s declared  0.1% (tunnels)  14.8 Mbit/s  bottleneck (loss)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	for _, not := range []string{"≤", "unknown", "upper bound", "rests on"} {
		if strings.Contains(out, not) {
			t.Errorf("%q in a plan with every input known:\n%s", not, out)
		}
	}
}
