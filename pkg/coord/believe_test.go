package coord

import (
	"math"
	"testing"

	"github.com/hashicorp/serf/coordinate"
)

// A peer that publishes a coordinate with Error 0 used to take the whole
// weight of a confident node's Vivaldi update (ownError / (ownError + 0)
// = 1): one probe of it moved the node all the way to where the liar's
// coordinate said it should be. Its error is now believed no lower than
// MinPeerError, so it moves the node as a peer that claims MinPeerError
// does, and no further; an honest peer's error is left as it is.
func TestObserveClampsAPeersClaimedError(t *testing.T) {
	// Two nodes in the same confident state (error 0.02, as honest nodes
	// settle in the simulator's plane), at the origin.
	confident := func() *Node {
		n := newNode(t, "self", Config{}, 1)
		c := coordinate.NewCoordinate(n.cfg.Vivaldi)
		c.Error = 0.02
		if err := n.client.SetCoordinate(c); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The liar places itself 100 ms away and is probed at 20 ms: a
	// believed update pulls this node 80 ms towards it.
	liarAt := func(errorClaimed float64) Peer {
		c := coordinate.NewCoordinate(coordinate.DefaultConfig())
		c.Vec[0] = 0.100
		c.Error = errorClaimed
		return Peer{Name: "liar", Coord: c}
	}
	moved := func(peerError float64) float64 {
		n := confident()
		n.Observe(t0, liarAt(peerError), 20, false)
		ms, ok := EstimateMs(n.Coordinate(), coordinate.NewCoordinate(n.cfg.Vivaldi))
		if !ok {
			t.Fatal("no estimate")
		}
		return ms
	}
	zero, atFloor, honest := moved(0), moved(MinPeerError), moved(0.3)
	t.Logf("moved by one probe of a peer claiming error 0: %.2f ms; %g: %.2f ms; 0.3: %.2f ms", zero, MinPeerError, atFloor, honest)
	if math.Abs(zero-atFloor) > 1e-9 {
		t.Errorf("a peer claiming error 0 moved the node %.2f ms, one claiming the floor %g %.2f ms: want the same", zero, MinPeerError, atFloor)
	}
	if !(honest < atFloor) {
		t.Errorf("a peer claiming error 0.3 moved the node %.2f ms, not less than one at the floor (%.2f ms): its error was changed", honest, atFloor)
	}
	// The peer's coordinate itself is not changed by being believed.
	c := liarAt(0).Coord
	if b := Believed(c); b == c || b.Error != MinPeerError || c.Error != 0 {
		t.Errorf("Believed(error 0) = %+v (input now %+v), want a copy at %g, the input unchanged", b, c, MinPeerError)
	}
	if h := liarAt(0.3).Coord; Believed(h) != h {
		t.Error("Believed copied a coordinate whose error is above the floor")
	}
}
