package main

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/relaymesh/relaymesh/pkg/pathbench"
	"github.com/relaymesh/relaymesh/planner"
)

// Each measured stream is set against the model's completion time for
// the bytes it moved: on split4 (a 50 ms path, relays every 12.5 ms, 4
// MiB windows) the warm chain sets up in 2 × 50 = 100 ms, and over a
// relay's TLS admin API one more round trip of the whole path.
func TestBenchModelsEachStream(t *testing.T) {
	data, err := os.ReadFile("../../planner/testdata/split4.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := planner.ParseMatrix(data)
	if err != nil {
		t.Fatal(err)
	}
	res, err := planner.Search(m, planner.Request{Client: "client", Destination: "srv"})
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	out := &benchJSON{
		Direct: &pathbench.Result{DownStreams: []pathbench.Stream{{Bytes: size, Seconds: 1.5}}},
		Chain:  &pathbench.Result{Relays: res.Best.Chain, DownStreams: []pathbench.Stream{{Bytes: size, Seconds: 0.5}, {Bytes: 1, Error: "reset"}}},
	}
	p := &planned{Result: res}
	modelStreams(out, p, true)
	if len(out.Modelled) != 2 {
		t.Fatalf("modelled %+v: want the direct stream and the chain's good one", out.Modelled)
	}
	for _, ms := range out.Modelled {
		plan := res.Direct
		if ms.Path == "chain" {
			plan = res.Best
		}
		want := planner.PredictTransfer(plan, planner.Model{Setup: planner.SetupWarm}, plan.PredictedDownBps, size)
		if math.Abs(ms.ModelS-(want.CompletionMs+plan.TotalRTTMs)/1000) > 1e-9 {
			t.Errorf("%s: modelled %.4f s, want the transfer's %.1f ms plus one round trip of %.1f ms", ms.Path, ms.ModelS, want.CompletionMs, plan.TotalRTTMs)
		}
	}
	if c := out.Modelled[1]; c.Path != "chain" || c.Transfer.SetupMs != 100 {
		t.Errorf("chain: %+v, want a warm setup of 100 ms", c)
	}
	var b bytes.Buffer
	printBench(&b, out, p)
	for _, want := range []string{"time per stream, measured against the model", "chain  down stream 1: 64.0 MiB in 0.50 s, modelled", "setup 100 ms + TLS 50 ms"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}
