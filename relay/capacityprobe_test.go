package relay

import (
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/packettrain"
	"github.com/relaymesh/relaymesh/pkg/registry"
)

// The budget holds in any hour, not only per refill: three measurements
// fit, the fourth waits until the first is an hour old, and no hour ever
// sees more than capacityBudgetBytes.
func TestCapacityBudget(t *testing.T) {
	b := byteBudget{limitBytes: capacityBudgetBytes, window: capacityBudgetWindow}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const cost = packettrain.MaxMeasurementBytes
	for i := range 3 {
		if _, ok := b.take(t0.Add(time.Duration(i)*10*time.Minute), cost); !ok {
			t.Fatalf("measurement %d refused within the budget", i+1)
		}
	}
	retry, ok := b.take(t0.Add(30*time.Minute), cost)
	if ok {
		t.Fatal("a fourth measurement in the hour was allowed")
	}
	if want := t0.Add(time.Hour); !retry.Equal(want) {
		t.Errorf("retry at %v, want %v (the first measurement an hour old)", retry, want)
	}
	if _, ok := b.take(t0.Add(59*time.Minute), cost); ok {
		t.Error("allowed a minute before the first measurement left the window")
	}
	if _, ok := b.take(t0.Add(time.Hour), cost); !ok {
		t.Error("refused once the first measurement left the window")
	}
	// Every hour-long window of a relay that asks every minute for a day.
	b = byteBudget{limitBytes: capacityBudgetBytes, window: capacityBudgetWindow}
	var allowed []time.Time
	for m := range 24 * 60 {
		at := t0.Add(time.Duration(m) * time.Minute)
		if _, ok := b.take(at, cost); ok {
			allowed = append(allowed, at)
		}
	}
	for i, start := range allowed {
		var bytes int64
		for _, at := range allowed[i:] {
			if at.Sub(start) < time.Hour {
				bytes += cost
			}
		}
		if bytes > capacityBudgetBytes {
			t.Fatalf("the hour from %v saw %d bytes, over %d", start, bytes, capacityBudgetBytes)
		}
	}
	if len(allowed) != 3*24 {
		t.Errorf("%d measurements in a day, want %d", len(allowed), 3*24)
	}
	// The figure the docs give: under 1 MB a relay an hour, sent and
	// received together.
	if 2*capacityBudgetBytes >= 1_000_000 {
		t.Errorf("2 × %d bytes of trains an hour: not under 1 MB", capacityBudgetBytes)
	}
}

// A tunnel's learnt rate stands over the probe's figure: it is what
// traffic got; the probe's is published only where no tunnel taught one,
// and only for an hour.
func TestWithCapacity(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := &capacityProbes{results: map[string]capacityResult{
		"b": {est: packettrain.Estimate{TCPBps: 90e6}, at: now.Add(-time.Minute)},
		"c": {est: packettrain.Estimate{TCPBps: 50e6}, at: now.Add(-time.Minute)},
		"d": {est: packettrain.Estimate{TCPBps: 70e6}, at: now.Add(-capacityMaxAge - time.Second)},
	}}
	tunnelAt := now.Add(-10 * time.Second)
	pairs := c.withCapacity([]registry.Pair{
		{From: "a", To: "b"},
		{From: "a", To: "c", SendBps: 30e6, SendAt: tunnelAt},
		{From: "a", To: "d"},
		{From: "a", To: "e"},
	}, now)
	want := []registry.Pair{
		{From: "a", To: "b", SendBps: 90e6, SendAt: now.Add(-time.Minute), SendSource: registry.SendFromProbe},
		{From: "a", To: "c", SendBps: 30e6, SendAt: tunnelAt},
		{From: "a", To: "d"},
		{From: "a", To: "e"},
	}
	for i := range want {
		if pairs[i] != want[i] {
			t.Errorf("pair %d: %+v, want %+v", i, pairs[i], want[i])
		}
	}
	var off *capacityProbes // probe.capacity off
	if got := off.withCapacity([]registry.Pair{{From: "a", To: "b"}}, now); got[0].SendBps != 0 {
		t.Errorf("with the probe off: %+v", got[0])
	}
}
