package shortlist

import (
	"context"
	"time"
)

// planRun is one plan's state: what the phases of Plan share, each phase
// a method (see the package documentation for the phases).
type planRun struct {
	ctx context.Context
	cfg Config
	// in is the plan's input; Describe may tell it more of the
	// destination (in.Destination).
	in    Input
	p     Prober
	st    Stats
	began time.Time

	client, dst string
	// l holds every RTT probed in this plan, by unordered pair, with the
	// pairs whose probe failed, no segment of this plan whatever was
	// published or estimated for them, and the relays the client's own
	// probe could not reach, no hop of this plan at all (their admin API,
	// which makes their probes, is out of reach too; a relay that
	// vanished still has its coordinate and its published pairs in the
	// registry until they age out).
	l *ledger
	// pending are the pairs probed and not answered yet (LateProber).
	pending map[[2]string]bool
	// ready says the ledger holds the endpoints' and the relays'
	// coordinates and the figures known beforehand: rtt can be asked,
	// and probe orders a batch by it (the landmarks' round it cannot).
	ready bool
}
