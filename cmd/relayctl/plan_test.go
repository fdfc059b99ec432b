package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/relaymesh/relaymesh/pkg/planroute"
	"github.com/relaymesh/relaymesh/pkg/shortlist"
	"github.com/relaymesh/relaymesh/pkg/survey"
	"github.com/relaymesh/relaymesh/planner"
)

func runPlan(args ...string) (string, error) {
	c := rootCmd()
	var out bytes.Buffer
	c.SetArgs(append([]string{"plan", "--matrix", "../../planner/testdata/split4.json", "--dst", "srv"}, args...))
	c.SetOut(&out)
	c.SetErr(&bytes.Buffer{})
	err := c.Execute()
	return out.String(), err
}

// --size reaches the planner with its unit, and the plan reports the
// completion time and the crossover, as a table and as JSON. On split4 (a
// 50 ms path, relays every 12.5 ms) a 10 KB object goes direct (both set
// up in 100 ms and the first round holds it); 10 MB goes through the
// full split. --setup cold moves the crossover from 14,480 B (one initial
// window) to 101,360 B (three rounds of direct's: 14,480 × 7).
func TestPlanSize(t *testing.T) {
	type planOut struct {
		Chain     []string `json:"chain"`
		SizeBytes int64    `json:"size_bytes"`
		Transfer  *struct {
			CompletionMs float64 `json:"completion_ms"`
			SetupMs      float64 `json:"setup_ms"`
		} `json:"transfer"`
		Crossover *struct {
			Kind  string `json:"kind"`
			Bytes int64  `json:"bytes"`
		} `json:"crossover"`
	}
	for _, tc := range []struct {
		args      []string
		size      int64
		chain     []string
		setupMs   float64
		crossover int64
	}{
		{[]string{"--size", "10KB"}, 10000, []string{}, 100, 14480},
		{[]string{"--size", "10MB"}, 10000000, []string{"r1", "r2", "r3"}, 100, 14480},
		{[]string{"--size", "1GiB", "--setup", "cold"}, 1 << 30, []string{"r1", "r2", "r3"}, 175, 101360},
	} {
		out, err := runPlan(append(tc.args, "-o", "json")...)
		var p planOut
		if err == nil {
			err = json.Unmarshal([]byte(out), &p)
		}
		if err != nil || !slices.Equal(p.Chain, tc.chain) || p.SizeBytes != tc.size || p.Transfer == nil ||
			p.Transfer.SetupMs != tc.setupMs || p.Crossover == nil || p.Crossover.Kind != "above" || p.Crossover.Bytes != tc.crossover {
			t.Errorf("plan %v: %v\n%s", tc.args, err, out)
		}
	}
	// Without --size: no size fields at all, as before.
	out, err := runPlan("-o", "json")
	if err != nil || strings.Contains(out, "size_bytes") || strings.Contains(out, "crossover") || strings.Contains(out, "transfer") {
		t.Errorf("plan without --size: %v\n%s", err, out)
	}
	out, err = runPlan("--size", "100KB")
	for _, want := range []string{
		"(down, 100 KB: ranked by completion time)",
		// TLS links (the default transport): 1,426 B a segment, 4 rounds.
		"100 KB in 138 ms (setup 100 ms + ramp 37.5 ms + steady 0 ms)",
		"crossover: the chain via r1, r2, r3 (best steady rate) finishes sooner than direct above 14.5 KB (14480 bytes)",
		"direct: client ──50.0 ms──▶ srv  671 Mbit/s, 100 KB in 200 ms",
	} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("plan --size 100KB: %v: no %q in\n%s", err, want, out)
		}
	}
	// Plain links carry whole segments: 3 rounds.
	out, err = runPlan("--size", "100KB", "--transport", "plain")
	if want := "100 KB in 125 ms (setup 100 ms + ramp 25.0 ms + steady 0 ms)"; err != nil || !strings.Contains(out, want) {
		t.Errorf("plan --size 100KB --transport plain: %v: no %q in\n%s", err, want, out)
	}
	for _, bad := range [][]string{{"--size", "ten"}, {"--size", "-1"}, {"--size", "1MB", "--setup", "hot"}} {
		if _, err := runPlan(bad...); err == nil {
			t.Errorf("plan %v: accepted", bad)
		}
	}
}

// The shortlist's counts out of range are refused with the flag's name,
// before any probe; a search budget of 0 is none.
func TestShortlistConfigNamesTheFlag(t *testing.T) {
	for _, c := range []int{0, 96} { // 0: the default, grown with the fleet
		ok := planFlags{shortlist: shortlist.Config{Candidates: c, Landmarks: 8, SearchBudget: shortlist.DefaultSearchBudget}}
		got, err := ok.shortlistConfig()
		if err != nil {
			t.Fatalf("candidates %d refused: %v", c, err)
		}
		if got.PlanSearchBudget() != shortlist.DefaultSearchBudget {
			t.Errorf("--shortlist-search-budget %s: the plan keeps %s", shortlist.DefaultSearchBudget, got.PlanSearchBudget())
		}
	}
	none := planFlags{shortlist: shortlist.Config{Landmarks: 8}}
	if got, err := none.shortlistConfig(); err != nil || got.PlanSearchBudget() != 0 {
		t.Errorf("--shortlist-search-budget 0: the plan keeps %s (%v), want none", got.PlanSearchBudget(), err)
	}
	for flag, f := range map[string]planFlags{
		"--shortlist-candidates":    {shortlist: shortlist.Config{Candidates: -1, Landmarks: 8}},
		"--shortlist-landmarks":     {shortlist: shortlist.Config{Candidates: 96, Landmarks: -1}},
		"--shortlist-deadline":      {shortlist: shortlist.Config{Landmarks: 8, Deadline: -time.Second}},
		"--shortlist-search-budget": {shortlist: shortlist.Config{Landmarks: 8, SearchBudget: -time.Second}},
	} {
		if _, err := f.shortlistConfig(); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: error %v, want one naming the flag", flag, err)
		}
	}
}

// plan -o json carries what scripts and the lab tests read of a plan that
// was kept ahead of an untried chain, or that waits for measurements.
func TestPlanJSONKeptOverAndAwaiting(t *testing.T) {
	p := &planned{Result: &planner.Result{KeptOver: []string{"r2"}, Awaiting: []string{"no relay's RTT to srv"},
		Best: planner.Plan{Bound: true}}}
	data, err := json.Marshal(p.json())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"kept_over":["r2"]`, `"awaiting":["no relay's RTT to srv"]`, `"bound":true`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("no %s in %s", want, data)
		}
	}
}

// stripesMatrix writes a matrix whose relays stripe (max_stripes) across a
// 200 ms link of a declared 400 Mbit/s, with stock buffers, and returns its
// path: one connection over that link barely beats direct, three do.
func stripesMatrix(t *testing.T) string {
	t.Helper()
	relay := `{"relay": true, "window_bytes": 3774873, "send_window_bytes": 4068474, "limit_bps": 4e8, "max_stripes": 8}`
	matrix := `{"nodes": {"client": {"window_bytes": 3774873}, "r1": ` + relay + `, "r2": ` + relay + `, "srv": {"window_bytes": 3774873}},
		"rtt_ms": [["client", "r1", 5], ["r1", "r2", 200], ["r2", "srv", 5], ["client", "srv", 210]]}`
	path := filepath.Join(t.TempDir(), "stripes.json")
	if err := os.WriteFile(path, []byte(matrix), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// On stripesMatrix the plan shows the striped segment as ×3 in its
// diagram and table, its JSON carries the stripes and one connection's
// rate, and --max-stripes 1 turns striping off.
func TestPlanStripes(t *testing.T) {
	path := stripesMatrix(t)
	run := func(args ...string) (string, error) {
		c := rootCmd()
		var out bytes.Buffer
		c.SetArgs(append([]string{"plan", "--matrix", path, "--dst", "srv", "--bench-history", ""}, args...))
		c.SetOut(&out)
		c.SetErr(&bytes.Buffer{})
		err := c.Execute()
		return out.String(), err
	}
	out, err := run()
	for _, want := range []string{"r1 ──200 ms ×3──▶ r2", "striped ×3 (one connection: 151 Mbit/s)", "r1→r2 striped ×3: one connection's window"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("plan: %v: no %q in\n%s", err, want, out)
		}
	}
	var p struct {
		Chain    []string          `json:"chain"`
		Segments []planner.Segment `json:"segments"`
	}
	out, err = run("-o", "json")
	if err == nil {
		err = json.Unmarshal([]byte(out), &p)
	}
	if err != nil || !slices.Equal(p.Chain, []string{"r1", "r2"}) || p.Segments[1].Stripes != 3 || p.Segments[1].OneLinkBps < 150e6 ||
		p.Segments[1].OneLinkLimitedBy != "window" || p.Segments[0].Stripes != 0 || !strings.Contains(out, `"stripes": 3`) {
		t.Errorf("plan -o json: %v\n%s", err, out)
	}
	out, err = run("--max-stripes", "1", "-o", "json")
	if err != nil || strings.Contains(out, "stripes") || strings.Contains(out, "one_link") {
		t.Errorf("plan --max-stripes 1: %v\n%s", err, out)
	}
	for _, bad := range []string{"9", "-1"} {
		if _, err := run("--max-stripes", bad); err == nil || !strings.Contains(err.Error(), "--max-stripes") {
			t.Errorf("plan --max-stripes %s: %v", bad, err)
		}
	}
}

// connect and pac take --max-stripes as plan does (one definition: same
// default, same help), and the number given reaches what they hand the
// planner: the request of a plan to --dst (connect and pac) and connect's
// per-destination plans without --dst. pac's file on stripesMatrix shows
// the plan it changes; a number the planner would refuse is refused as a
// flag.
func TestMaxStripesConnectAndPAC(t *testing.T) {
	plan, _, err := rootCmd().Find([]string{"plan"})
	if err != nil {
		t.Fatal(err)
	}
	want := plan.Flags().Lookup("max-stripes")
	for name, cmdOf := range map[string]func(*planFlags) *cobra.Command{"connect": connectCmdOf, "pac": pacCmdOf} {
		var f planFlags
		cmd := cmdOf(&f)
		got := cmd.Flags().Lookup("max-stripes")
		if got == nil || got.Usage != want.Usage || got.DefValue != want.DefValue {
			t.Fatalf("%s --max-stripes: %+v, want plan's %+v", name, got, want)
		}
		for _, tc := range []struct {
			args []string
			want int
		}{{nil, planner.DefaultMaxStripes}, {[]string{"--max-stripes", "1"}, 1}, {[]string{"--max-stripes", "2"}, 2}} {
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			req, err := f.request("client", "srv")
			if err != nil || req.Constraints.MaxStripes != tc.want {
				t.Errorf("%s %v: request's max stripes %d (%v), want %d", name, tc.args, req.Constraints.MaxStripes, err, tc.want)
			}
			if name != "connect" {
				continue
			}
			if got := f.perDestination(planroute.Config{}, survey.Survey{}, time.Minute, nil).MaxStripes; got != tc.want {
				t.Errorf("connect %v without --dst: per-destination max stripes %d, want %d", tc.args, got, tc.want)
			}
		}
	}

	pac := func(args ...string) (string, error) {
		return runRelayctl(append([]string{"pac", "--matrix", stripesMatrix(t), "--dst", "srv", "--hosts", "*.example", "--proxy", "127.0.0.1:1080"}, args...)...)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "// plan: r1 -> r2\n// predicted 384.2 Mbit/s"}, // ×3 over r1→r2
		{[]string{"--max-stripes", "2"}, "// plan: r1 -> r2\n// predicted 290.0 Mbit/s"},
		{[]string{"--max-stripes", "1"}, "// plan: direct (no chain beats it)"},
	} {
		if out, err := pac(tc.args...); err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("pac %v: %v: no %q in\n%s", tc.args, err, tc.want, out)
		}
	}
	for _, args := range [][]string{{"pac", "--proxy", "127.0.0.1:1080", "--matrix", stripesMatrix(t), "--dst", "srv", "--hosts", "*.example"}, {"connect"}} {
		if _, err := runRelayctl(append(args, "--max-stripes", "9")...); err == nil || !strings.Contains(err.Error(), "--max-stripes 9: want 1 (no striping) to 8") {
			t.Errorf("%s --max-stripes 9: %v, want refused", args[0], err)
		}
	}
}
