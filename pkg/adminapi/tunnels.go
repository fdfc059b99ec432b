package adminapi

import (
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// Tunnels is what /v1/tunnels answers: the last ended tunnels, newest
// first.
type Tunnels struct {
	Tunnels []TunnelRecord `json:"tunnels"`
}

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
	// ClientLinks and NextLinks replace Client and Next for a side carried
	// over several connections (a striped segment): each link's socket, in
	// stripe order.
	ClientLinks []tunnel.SocketStats `json:"client_links,omitempty"`
	NextLinks   []tunnel.SocketStats `json:"next_links,omitempty"`
	Result      string               `json:"result"`
}
