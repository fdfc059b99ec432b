package relay

import (
	"net/netip"
	"time"

	"github.com/relaymesh/relaymesh/pkg/registry"
)

// A relay learns what each path it sends on can carry from the tunnels it
// carries (pkg/learnt: the sustained-rate watcher and its rules, by remote
// host). What it learnt of a peer relay's host goes on its published pair
// to that peer.

// withSendRates sets each pair's send rate to what learnt (a
// learnt.Rates.Learnt) says of the peer's host. pairs are this relay's
// own (From is self).
func withSendRates(pairs []registry.Pair, relays []registry.Relay, now time.Time,
	learnt func(host netip.Addr, now time.Time) (bps float64, age time.Duration, ok bool)) []registry.Pair {
	hostOf := make(map[string]netip.Addr, len(relays))
	for _, rl := range relays {
		if ap, err := netip.ParseAddrPort(rl.Relay); err == nil {
			hostOf[rl.Name] = ap.Addr().Unmap()
		}
	}
	for i := range pairs {
		if h, ok := hostOf[pairs[i].To]; ok {
			if bps, age, ok := learnt(h, now); ok {
				pairs[i].SendBps, pairs[i].SendAt = bps, now.Add(-age)
			}
		}
	}
	return pairs
}
