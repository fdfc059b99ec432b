package lab

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/relaymesh/relaymesh/pkg/lab/topology"
	"github.com/relaymesh/relaymesh/pkg/lab/wanemu"
)

// The doctor under load. The engine alone on a quiet machine holds far
// more than it does beside what a lab runs: relays (TLS, probes), the
// traffic service, curl and every namespace's kernel TCP compete for the
// same CPUs. So the doctor also runs a real lab, a split4-like chain of
// three relays beside a direct link, at rising link rates, with a download
// through the relays and one direct at once, and judges each step as a
// test's run would be judged: by effect, and by the strict bounds.

// LoadStep is one rate of the doctor's run under load.
type LoadStep struct {
	RateMbit   float64 `json:"rate_mbit"`   // every link's, per direction
	ChainMbit  float64 `json:"chain_mbit"`  // the download through the relays
	DirectMbit float64 `json:"direct_mbit"` // the download beside it
	// LinkMbit and LinkPps: what the engine carried, summed over link
	// directions, over the step.
	LinkMbit float64 `json:"link_mbit"`
	LinkPps  float64 `json:"link_pps"`
	// Valid: by effect, as a test that checks its figures within 15 %
	// over half the step; StrictValid: by the absolute bounds.
	Valid       bool   `json:"valid"`
	StrictValid bool   `json:"strict_valid"`
	Verdict     string `json:"verdict"` // the check by effect, for a person
}

// Reached says whether the chain's download came near the link rate: a
// step whose flow fell short (the endpoints or relays ran out of CPU
// first) says nothing about higher rates.
func (s LoadStep) Reached() bool { return s.ChainMbit > 0.8*s.RateMbit*1448/1500 }

// underLoadRTTMs is each relay segment's RTT (the direct link is the sum).
const underLoadRTTMs = 12.5

// underLoadTopology is the doctor's lab: client, r1-r2-r3 on the native
// protocol, server, 4 segments of underLoadRTTMs and the direct link.
func underLoadTopology(name string, rateMbit float64) (*topology.Topology, error) {
	var b strings.Builder
	fmt.Fprintf(&b, `name: %s
nodes:
  client: {}
  r1: {role: relay, region: hop1, next: [r2, r3]}
  r2: {role: relay, region: hop2}
  r3: {role: relay, region: hop3}
  server: {role: server, region: far}
links:
`, name)
	q := underLoadQueueKB(rateMbit)
	for _, l := range [][2]string{{"client", "r1"}, {"r1", "r2"}, {"r2", "r3"}, {"r3", "server"}} {
		fmt.Fprintf(&b, "  - {between: [%s, %s], rtt_ms: %g, rate_mbit: %g, queue_kb: %d}\n", l[0], l[1], underLoadRTTMs, rateMbit, q)
	}
	fmt.Fprintf(&b, "  - {between: [client, server], rtt_ms: %g, rate_mbit: %g, queue_kb: %d}\n", 4*underLoadRTTMs, rateMbit, q)
	return topology.Parse([]byte(b.String()))
}

// underLoadQueueKB is one direct path's BDP at the rate: a queue that
// holds a burst without letting a flow build minutes of delay.
func underLoadQueueKB(rateMbit float64) int {
	return max(64, int(rateMbit*1e6/8*4*underLoadRTTMs/1e3/1024))
}

// calibrateUnderLoad runs the doctor's lab at each of o.LoadRatesMbit
// until a rate is invalid by effect twice, or its download falls short.
func calibrateUnderLoad(ctx context.Context, o CalibrateOptions) ([]LoadStep, error) {
	root, err := os.MkdirTemp("", "relaymesh-doctor")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	name := "rmdl" + strconv.Itoa(os.Getpid()%100000)
	topo, err := underLoadTopology(name, o.LoadRatesMbit[0])
	if err != nil {
		return nil, err
	}
	l, err := Up(ctx, topo, "lab doctor (under load)", Options{StateRoot: root, RelaydPath: o.RelaydPath,
		TrafficCmd: o.TrafficCmd, Transport: "tls"})
	if err != nil {
		return nil, fmt.Errorf("lab doctor: the lab under load: %w", err)
	}
	defer l.Close()
	time.Sleep(3 * time.Second) // the relays' first probes and TLS links
	var steps []LoadStep
	for _, rate := range o.LoadRatesMbit {
		var ok bool
		for attempt := 1; attempt <= 2 && !ok; attempt++ {
			s, err := l.loadStep(ctx, topo, rate, o.Duration)
			if err != nil {
				return steps, err
			}
			steps = append(steps, s)
			o.Progress("under load, %d links at %4.0f Mbit/s: chain %6.1f and direct %6.1f Mbit/s; %6.0f Mbit/s and %6.0f packets/s summed; %s",
				len(topo.Links), rate, s.ChainMbit, s.DirectMbit, s.LinkMbit, s.LinkPps, s.Verdict)
			ok = s.Valid && s.Reached()
		}
		if !ok {
			break
		}
	}
	return steps, nil
}

// loadStep sets every link to rateMbit and measures one step.
func (l *Lab) loadStep(ctx context.Context, topo *topology.Topology, rateMbit float64, d time.Duration) (LoadStep, error) {
	s := LoadStep{RateMbit: rateMbit}
	q := underLoadQueueKB(rateMbit)
	for _, lc := range topo.Links {
		if _, err := l.UpdateLink(LinkUpdate{Between: lc.Between, RateMbit: &rateMbit, QueueKB: &q}); err != nil {
			return s, err
		}
	}
	l.ResetStats()
	// Each download is sized to last about d at the link rate, and cut at
	// twice that.
	size := int64(rateMbit * 1e6 / 8 * d.Seconds())
	curl := fmt.Sprintf(`curl -sS -o /dev/null --max-time %.0f -w '%%{speed_download}\n'`, 2*d.Seconds()+5)
	script := fmt.Sprintf(`%s http://server:8000/bytes/%d > /tmp/%s-direct & %s -x socks5h://r1:1080 http://server:8000/bytes/%d; wait; cat /tmp/%s-direct; rm -f /tmp/%s-direct`,
		curl, size, l.Name, curl, size, l.Name, l.Name)
	cmd, err := l.Command(ctx, topology.ClientNode, "sh", "-c", script)
	if err != nil {
		return s, err
	}
	start := time.Now()
	out, err := cmd.Output()
	secs := time.Since(start).Seconds()
	if err != nil {
		return s, fmt.Errorf("lab doctor: downloads at %g Mbit/s: %w (curl needed in the client node: make test-deps installs it)", rateMbit, err)
	}
	if f := strings.Fields(string(out)); len(f) == 2 {
		chain, _ := strconv.ParseFloat(f[0], 64)
		direct, _ := strconv.ParseFloat(f[1], 64)
		s.ChainMbit, s.DirectMbit = chain*8/1e6, direct*8/1e6
	}
	for _, rl := range l.links {
		ab, ba := rl.link.Stats()
		s.LinkMbit += float64(ab.Bytes+ba.Bytes) * 8 / 1e6 / secs
		s.LinkPps += float64(ab.Packets+ba.Packets) / secs
	}
	byEffect := l.VerdictBy(Check{Budget: wanemu.Budget{ToleranceShare: 0.15, WindowNs: int64(d / 2)}})
	s.Valid, s.StrictValid = byEffect.Valid, l.VerdictBy(Check{Strict: true}).Valid
	s.Verdict = "valid"
	if !s.Valid {
		s.Verdict = "invalid: " + firstLine(strings.Join(byEffect.Problems, "; "))
	} else if byEffect.Worst >= 0 {
		w := byEffect.Links[byEffect.Worst]
		s.Verdict = fmt.Sprintf("valid, worst link %s-%s moves a figure by %.1f %%", w.Between[0], w.Between[1], 100*w.Effect.Moves)
	}
	if !s.StrictValid {
		s.Verdict += " (strict: invalid)"
	}
	return s, nil
}
