package coord

import "github.com/hashicorp/serf/coordinate"

// MinPeerError is the least error (Serf's Vivaldi error: the relative
// error a node expects of its coordinate's estimates) believed of a
// coordinate another node published. A Vivaldi update weighs the peer by
// ownError / (ownError + peerError): a peer that claims 0 gets the whole
// weight whatever this node's own confidence, and moves this coordinate
// (and its own error) as far as its lie asks. A coordinate cannot be known
// better than the RTTs it is fitted to: a TCP handshake's RTT varies by a
// few per cent between samples on a quiet path, and honest nodes settle at
// errors of a few per cent at best (docs/defaults.md#a-peers-believed-error).
// At 5 % a liar weighs at most what an honest peer as good as the probes
// allow weighs, and honest peers on real paths are left as they are.
const MinPeerError = 0.05

// Believed is c as a peer's coordinate is believed: its Error raised to
// MinPeerError when below it (a copy; c is not changed), c itself
// otherwise. nil stays nil.
func Believed(c *coordinate.Coordinate) *coordinate.Coordinate {
	if c == nil || c.Error >= MinPeerError {
		return c
	}
	b := c.Clone()
	b.Error = MinPeerError
	return b
}
