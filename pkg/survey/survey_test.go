package survey

import (
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/registry"
)

func TestResolveTarget(t *testing.T) {
	relays := []registry.Relay{
		{Name: "tokyo-1", Region: "tokyo", Admin: "10.0.0.1:9090"},
		{Name: "osaka", Region: "osaka", Admin: "10.0.0.2:9090"},
		{Name: "os2", Region: "osaka", Admin: "10.0.0.3:9090"},
	}
	tg, err := ResolveTarget("srv.example:443", relays)
	if err != nil || tg.Addr != "srv.example:443" || tg.Name != "srv.example:443" || tg.Relay != "" {
		t.Fatalf("host:port: %+v %v", tg, err)
	}
	// A region is a host next to its relay: the relay's admin address,
	// under a node name apart from the relay's.
	tg, err = ResolveTarget("Tokyo", relays)
	if err != nil || tg.Addr != "10.0.0.1:9090" || tg.Relay != "tokyo-1" || tg.Name != "dst:Tokyo" {
		t.Fatalf("region: %+v %v", tg, err)
	}
	if _, err := ResolveTarget("osaka", relays); err == nil || !strings.Contains(err.Error(), "os2, osaka") {
		t.Fatalf("ambiguous region: %v", err)
	}
	if _, err := ResolveTarget("paris", relays); err == nil || !strings.Contains(err.Error(), "regions: osaka, tokyo") {
		t.Fatalf("unknown: %v", err)
	}
}

func TestRelayPairsNewestOfBothDirections(t *testing.T) {
	now := time.Unix(1000, 0)
	usable := map[string]registry.Relay{"a": {}, "b": {}, "c": {}}
	pairs := []registry.Pair{
		{From: "a", To: "b", RTTMs: 10, Samples: 5, UpdatedAt: now.Add(-30 * time.Second)},
		{From: "b", To: "a", RTTMs: 11, Samples: 5, UpdatedAt: now.Add(-2 * time.Second)},
		{From: "a", To: "c", RTTMs: 20, Samples: 5, Loss: 1, UpdatedAt: now},               // no answer: unusable
		{From: "c", To: "b", RTTMs: 30, Estimated: true, UpdatedAt: now.Add(-time.Minute)}, // a prior: used, marked
		{From: "a", To: "gone", RTTMs: 5, Samples: 5, UpdatedAt: now},                      // not a usable relay
	}
	got := relayPairs(pairs, usable, now)
	if len(got) != 2 {
		t.Fatalf("pairs %+v, want a-b and b-c", got)
	}
	if got[0].A != "a" || got[0].B != "b" || got[0].RTTMs != 11 || got[0].AgeSec != 2 {
		t.Fatalf("a-b: %+v, want b's newer 11 ms, 2 s old", got[0])
	}
	if got[1].A != "b" || got[1].B != "c" || !got[1].Estimated || got[1].AgeSec != 60 {
		t.Fatalf("b-c: %+v", got[1])
	}
}

func TestWindowOfRmem(t *testing.T) {
	if w := WindowOfRmem(262144); w < 150_000 || w > 165_000 {
		t.Fatalf("256 KiB tcp_rmem: window %d, want ~158 KB (split.md's direct rate)", w)
	}
}
