package relay

import (
	"net/http"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// recentTunnelsKept is how many ended tunnels /v1/tunnels remembers.
const recentTunnelsKept = 64

// recentTunnels is a ring of the last ended tunnels.
type recentTunnels struct {
	mu   sync.Mutex
	ring []adminapi.TunnelRecord
	next int
}

func (r *recentTunnels) add(rec adminapi.TunnelRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ring) < recentTunnelsKept {
		r.ring = append(r.ring, rec)
		return
	}
	r.ring[r.next] = rec
	r.next = (r.next + 1) % recentTunnelsKept
}

// newestFirst copies the ring, the most recently ended tunnel first.
func (r *recentTunnels) newestFirst() []adminapi.TunnelRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]adminapi.TunnelRecord, 0, len(r.ring))
	for i := range r.ring {
		// r.next is the oldest once the ring is full; before, index 0.
		out = append(out, r.ring[(r.next+len(r.ring)-1-i)%len(r.ring)])
	}
	return out
}

// record builds a tunnel's record from tunnel.Pipe's result.
func tunnelRecord(frontend, result string, start time.Time, res tunnel.Result) adminapi.TunnelRecord {
	rec := adminapi.TunnelRecord{EndedAt: time.Now().UTC(), DurationMs: time.Since(start).Milliseconds(), Frontend: frontend,
		UpBytes: res.AToB, DownBytes: res.BToA, Result: result}
	if res.A.Valid {
		rec.Client = &res.A
	}
	if res.B.Valid {
		rec.Next = &res.B
	}
	rec.ClientLinks, rec.NextLinks = res.ALinks, res.BLinks
	return rec
}

// serveTunnels is GET /v1/tunnels: the last ended tunnels, newest first.
func (s *Server) serveTunnels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, adminapi.Tunnels{Tunnels: s.recent.newestFirst()})
}
