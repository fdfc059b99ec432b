package relay

import (
	"net/netip"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/registry"
)

// A pair's send rate is what was learnt of its peer's host (by the
// peer's relay address), with its age; a peer nothing was learnt of, or
// one the registry no longer lists, keeps none.
func TestWithSendRates(t *testing.T) {
	now := time.Unix(5000, 0)
	learnt := func(host netip.Addr, at time.Time) (float64, time.Duration, bool) {
		if host == netip.MustParseAddr("10.0.0.1") && at.Equal(now) {
			return 30e6, time.Minute, true
		}
		return 0, 0, false
	}
	pairs := withSendRates([]registry.Pair{{From: "self", To: "ra"}, {From: "self", To: "rb"}, {From: "self", To: "gone"}},
		[]registry.Relay{{Name: "ra", Relay: "[::ffff:10.0.0.1]:7000"}, {Name: "rb", Relay: "10.0.0.2:7000"}}, now, learnt)
	if pairs[0].SendBps != 30e6 || !pairs[0].SendAt.Equal(now.Add(-time.Minute)) || pairs[1].SendBps != 0 || pairs[2].SendBps != 0 {
		t.Errorf("pairs %+v: want 30 Mbit/s to ra only", pairs)
	}
}
