package fleetsim

import (
	"math/rand/v2"

	"github.com/relaymesh/relaymesh/pkg/hostnet"
)

// mixedRmem are the hosts' buffers Config.MixedWindows gives relays:
// tcp_rmem's max, and the share of relays with it. Chosen, not measured:
// half on a stock kernel's, the rest raised by their operators.
var mixedRmem = []struct {
	rmemBytes int64
	share     float64
}{{6 << 20, 0.5}, {16 << 20, 0.3}, {64 << 20, 0.2}}

// mixedWindowBytes draws a relay's receive window from mixedRmem.
func mixedWindowBytes(rnd *rand.Rand) int64 {
	u := rnd.Float64()
	for _, m := range mixedRmem {
		if u < m.share {
			return hostnet.WindowOfRmem(m.rmemBytes)
		}
		u -= m.share
	}
	return hostnet.WindowOfRmem(mixedRmem[len(mixedRmem)-1].rmemBytes)
}
