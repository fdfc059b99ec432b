package relay

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// recentTunnelsKept is how many ended tunnels /v1/tunnels remembers.
const recentTunnelsKept = 64

// TunnelRecord is one ended tunnel as /v1/tunnels reports it: what moved
// and, for each of its two sockets, the kernel's TCP_INFO as it ended. No
// addresses: which limit a segment met is what it is for (relayctl bench
// reads it to say, per segment, whether the receiver's window, the send
// buffer or congestion control held the sender back).
type TunnelRecord struct {
	EndedAt    time.Time `json:"ended_at"`
	DurationMs int64     `json:"duration_ms"`
	Frontend   string    `json:"frontend"` // relay, socks5, http
	// UpBytes came from the client side and went on; DownBytes came back.
	UpBytes   int64 `json:"up_bytes"`
	DownBytes int64 `json:"down_bytes"`
	// Client is the socket towards the client or the previous relay (on a
	// download its sender statistics describe the segment towards the
	// client), Next the one towards the next relay or the destination.
	Client *tunnel.SocketStats `json:"client,omitempty"`
	Next   *tunnel.SocketStats `json:"next,omitempty"`
	Result string              `json:"result"`
}

// recentTunnels is a ring of the last ended tunnels.
type recentTunnels struct {
	mu   sync.Mutex
	ring []TunnelRecord
	next int
}

func (r *recentTunnels) add(rec TunnelRecord) {
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
func (r *recentTunnels) newestFirst() []TunnelRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]TunnelRecord, 0, len(r.ring))
	for i := range r.ring {
		// r.next is the oldest once the ring is full; before, index 0.
		out = append(out, r.ring[(r.next+len(r.ring)-1-i)%len(r.ring)])
	}
	return out
}

// record builds a tunnel's record from tunnel.Pipe's result.
func tunnelRecord(frontend, result string, start time.Time, res tunnel.Result) TunnelRecord {
	rec := TunnelRecord{EndedAt: time.Now().UTC(), DurationMs: time.Since(start).Milliseconds(), Frontend: frontend,
		UpBytes: res.AToB, DownBytes: res.BToA, Result: result}
	if res.A.Valid {
		rec.Client = &res.A
	}
	if res.B.Valid {
		rec.Next = &res.B
	}
	return rec
}

// serveTunnels is GET /v1/tunnels: the last ended tunnels, newest first.
func (s *Server) serveTunnels(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"tunnels": s.recent.newestFirst()})
}
