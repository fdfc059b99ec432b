package fleetsim

import (
	"math/rand/v2"

	"github.com/relaymesh/relaymesh/pkg/hostnet"
)

// mixedRmem are the hosts' buffers Config.MixedWindows gives relays:
// tcp_rmem's max, and the share of relays with it. Chosen, not measured:
// half on a stock kernel's, the rest raised by their operators.
var mixedRmem = []rmemTier{{6 << 20, 0.5}, {16 << 20, 0.3}, {64 << 20, 0.2}}

// rmemTier is a host's tcp_rmem max and the share of relays with it.
type rmemTier struct {
	rmemBytes int64
	share     float64
}

// windowBytes is the receive window autotuning reaches with the tier's
// buffer.
func (t rmemTier) windowBytes() int64 { return hostnet.WindowOfRmem(t.rmemBytes) }

// mixedWindowBytes draws a relay's receive window from mixedRmem.
func mixedWindowBytes(rnd *rand.Rand) int64 {
	u := rnd.Float64()
	for _, m := range mixedRmem {
		if u < m.share {
			return m.windowBytes()
		}
		u -= m.share
	}
	return mixedRmem[len(mixedRmem)-1].windowBytes()
}
