package relay

import (
	"testing"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
)

// The ring keeps the last recentTunnelsKept tunnels, newest first, across
// the wrap.
func TestRecentTunnelsNewestFirst(t *testing.T) {
	var r recentTunnels
	if got := r.newestFirst(); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	for i := range recentTunnelsKept + 5 {
		r.add(adminapi.TunnelRecord{UpBytes: int64(i)})
		got := r.newestFirst()
		if want := min(i+1, recentTunnelsKept); len(got) != want {
			t.Fatalf("after %d adds: %d records, want %d", i+1, len(got), want)
		}
		for j, rec := range got {
			if rec.UpBytes != int64(i-j) {
				t.Fatalf("after %d adds, record %d is tunnel %d, want %d", i+1, j, rec.UpBytes, i-j)
			}
		}
	}
}
