package lab

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/relaymesh/relaymesh/pkg/lab/topology"
)

// Every shipped topology fits the emulator's packet slots; a link that
// does not is refused before anything is built, named with its direction.
func TestCheckSlots(t *testing.T) {
	files, err := filepath.Glob("../../configs/lab/*.yaml")
	if err != nil || len(files) < 10 {
		t.Fatalf("found %d shipped topologies (%v): the test no longer finds them", len(files), err)
	}
	for _, f := range files {
		topo, err := topology.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkSlots(topo); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	// 10 Gbit/s over 300 ms one way: only that direction needs too many.
	topo, err := topology.Parse([]byte(`name: big
nodes: {client: {}, r1: {role: relay}, srv: {role: server}}
links:
  - {between: [client, r1], rtt_ms: 2}
  - {between: [r1, srv], delay_ms: [300, 10], rate_mbit: 10000}
`))
	if err != nil {
		t.Fatal(err)
	}
	err = checkSlots(topo)
	if err == nil || !strings.Contains(err.Error(), "links[1] r1->srv: needs") || strings.Contains(err.Error(), "links[0]") ||
		strings.Contains(err.Error(), "srv->r1") || !strings.Contains(err.Error(), "more than the emulator holds") {
		t.Fatalf("checkSlots of a 10 Gbit/s, 300 ms link: %v", err)
	}
}
