package lab

import (
	"math"
	"slices"
	"testing"

	"github.com/relaymesh/relaymesh/pkg/lab/topology"
)

func TestEstimateDemand(t *testing.T) {
	// split4: every receiver's window is 0.62 × 256 KiB over 12.5 ms
	// segments (104 Mbit/s), four links.
	topo, err := topology.Load("../../configs/lab/split4.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := EstimateDemand(topo)
	wantFlow := 0.62 * 262144 * 8 / 0.0125 / 1e6
	if !slices.Equal(d.Path, []string{"client", "r1", "r2", "r3", "server"}) || math.Abs(d.FlowMbit-wantFlow) > 0.5 || math.Abs(d.LinkMbit-4*wantFlow) > 2 {
		t.Fatalf("split4: %+v, want the 4-link path at %.1f Mbit/s (%.1f summed)", d, wantFlow, 4*wantFlow)
	}
	// A link rate below the window bound caps the flow.
	topo, err = topology.Parse([]byte(`name: capped
nodes:
  client: {}
  r1: {role: relay}
  server: {role: server}
links:
  - {between: [client, r1], rtt_ms: 10, rate_mbit: 30}
  - {between: [r1, server], rtt_ms: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	if d := EstimateDemand(topo); d.FlowMbit != 30 || d.LinkMbit != 60 {
		t.Fatalf("capped: %+v, want 30 Mbit/s over 2 links", d)
	}
	c := Calibration{HeldLinkMbit: 50}
	if err := c.CheckAgainst(topo); err == nil {
		t.Fatal("60 Mbit/s against 50 held: no warning")
	}
	c.HeldLinkMbit = 60
	if err := c.CheckAgainst(topo); err != nil {
		t.Fatalf("60 against 60: %v", err)
	}
}
