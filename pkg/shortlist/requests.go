package shortlist

// A Request is how a prober makes some of a round's probes: the client's
// probe alone (this host times its own handshakes, one after another), or
// a relay's probes of one handshake count together, asked of it in one
// request that it makes at once. A second request in flight to the same
// relay would open a second connection to it: over TLS, two round trips
// more before it is even read.
type Request struct {
	From       string
	Handshakes int
	// At are the probes' indices in the round, in order.
	At []int
	// Awaited says one of them is (Probe.Awaited): the round waits for
	// this request's answer, whatever its quorum.
	Awaited bool
}

// Requests groups a round's probes into requests, in the order of each
// request's first probe (Plan puts the longest probes first, so the slowest
// requests start first): each probe from client is a request of its own, a
// relay's probes of one handshake count are one request, split at
// maxTargets (no limit when <= 0). Probes makeable reports false for (an
// end the prober does not know) are left out: their values stay 0,
// failed.
func Requests(probes []Probe, client string, maxTargets int, makeable func(Probe) bool) []Request {
	var reqs []Request
	type key struct {
		from       string
		handshakes int
	}
	open := map[key]int{} // the request each relay's probes join, an index in reqs
	for i, pr := range probes {
		if makeable != nil && !makeable(pr) {
			continue
		}
		if pr.From == client {
			reqs = append(reqs, Request{From: pr.From, Handshakes: pr.Handshakes, At: []int{i}, Awaited: pr.Awaited})
			continue
		}
		k := key{pr.From, pr.Handshakes}
		j, ok := open[k]
		if !ok || maxTargets > 0 && len(reqs[j].At) == maxTargets {
			j = len(reqs)
			open[k] = j
			reqs = append(reqs, Request{From: pr.From, Handshakes: pr.Handshakes})
		}
		reqs[j].At = append(reqs[j].At, i)
		reqs[j].Awaited = reqs[j].Awaited || pr.Awaited
	}
	return reqs
}
