package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/pathbench"
	"github.com/relaymesh/relaymesh/pkg/registry"
)

// segmentLimit is one segment of the chain as its sender's TCP_INFO saw it
// over a bench's transfers in one direction: which limit held the sender
// back. The chain's relays keep their last tunnels' socket statistics
// (GET /v1/tunnels); the bench reads them after its transfers.
type segmentLimit struct {
	Direction string `json:"direction"` // down or up
	From      string `json:"from"`      // the sender: a relay, "client" or "destination"
	To        string `json:"to"`
	// Seen is false when the sender is not a relay (the client's or the
	// destination's own socket) or its tunnels were not found.
	Seen  bool    `json:"seen"`
	RTTMs float64 `json:"rtt_ms,omitempty"`
	// RwndLimited and SndbufLimited are the shares of the sender's busy
	// time the receiver's window and the send buffer held it back; the
	// rest is congestion control's (or an idle source's).
	RwndLimited     float64 `json:"rwnd_limited"`
	SndbufLimited   float64 `json:"sndbuf_limited"`
	PeerWindowBytes uint32  `json:"peer_window_bytes,omitempty"` // what the receiver advertised last
	// SendBufferBytes is the sender's send buffer (SO_SNDBUF): the kernel
	// counts SndbufLimited only while nothing unsent is queued, so a
	// sender its buffer holds back can show 0 there; a buffer smaller
	// than the receiver's window says more.
	SendBufferBytes int    `json:"send_buffer_bytes,omitempty"`
	Retransmits     uint32 `json:"retransmits"`
	// Tunnels is how many of the sender's tunnels (one per stream) this
	// sums.
	Tunnels int `json:"tunnels"`
}

// adminGetter is the admin API call segment reports need (adminapi.Client).
type adminGetter interface {
	Get(ctx context.Context, name, addr, path, token string, limit int64) ([]byte, error)
}

// chainTunnels reads each chain relay's ended tunnels: the first relay's
// admin API directly, the others through it along the chain (?via=), the
// way the traffic went. A relay that does not answer gets nil.
func chainTunnels(ctx context.Context, admin adminGetter, token string, chain []string, relays map[string]registry.Relay) [][]adminapi.TunnelRecord {
	out := make([][]adminapi.TunnelRecord, len(chain))
	if len(chain) == 0 {
		return out
	}
	first := relays[chain[0]]
	for i := range chain {
		path := adminapi.PathTunnels
		if i > 0 {
			path += "?via=" + url.QueryEscape(strings.Join(chain[1:i+1], ","))
		}
		body, err := admin.Get(ctx, first.Name, first.Admin, path, token, 1<<20)
		if err != nil {
			continue
		}
		var v adminapi.Tunnels
		if json.Unmarshal(body, &v) == nil {
			out[i] = v.Tunnels
		}
	}
	return out
}

// segmentLimits sums, per segment of chain, the sender's statistics over
// the streams tunnels that moved the most bytes in the direction, at least
// minBytes, and ended after since (the bench's transfers; its 1-byte
// time-to-first-byte tunnels move far less). tunnels[i] is chain[i]'s.
func segmentLimits(down bool, streams int, minBytes int64, since time.Time, chain []string, tunnels [][]adminapi.TunnelRecord) []segmentLimit {
	dir := "up"
	if down {
		dir = "down"
	}
	// The nodes along the path, client first.
	nodes := append(append([]string{"client"}, chain...), "destination")
	var out []segmentLimit
	for k := 0; k+1 < len(nodes); k++ {
		seg := segmentLimit{Direction: dir, From: nodes[k], To: nodes[k+1]}
		// The relay whose socket sends on segment k, and which of its two.
		ri, useClientSide := k, true // download: relay k sends towards nodes[k]
		if down {
			seg.From, seg.To = nodes[k+1], nodes[k]
		} else {
			ri, useClientSide = k-1, false // upload: relay k-1 sends towards nodes[k+1]
		}
		if ri < 0 || ri >= len(chain) {
			out = append(out, seg) // the client's or the destination's own socket
			continue
		}
		for _, rec := range biggest(tunnels[ri], down, streams, minBytes, since) {
			st := rec.Next
			if useClientSide {
				st = rec.Client
			}
			if st == nil {
				continue
			}
			seg.Seen = true
			seg.Tunnels++
			seg.RTTMs = max(seg.RTTMs, st.RTTMs)
			if st.BusyMs > 0 {
				seg.RwndLimited += float64(st.RwndLimitedMs) / float64(st.BusyMs)
				seg.SndbufLimited += float64(st.SndbufLimitedMs) / float64(st.BusyMs)
			}
			if seg.PeerWindowBytes == 0 || st.PeerWindowBytes < seg.PeerWindowBytes {
				seg.PeerWindowBytes = st.PeerWindowBytes
			}
			seg.Retransmits += st.Retransmits
			if seg.SendBufferBytes == 0 || st.SendBufferBytes < seg.SendBufferBytes {
				seg.SendBufferBytes = st.SendBufferBytes
			}
		}
		if seg.Tunnels > 0 {
			seg.RwndLimited /= float64(seg.Tunnels)
			seg.SndbufLimited /= float64(seg.Tunnels)
		}
		out = append(out, seg)
	}
	return out
}

// biggest is the n relay-link tunnels that ended after since and moved the
// most bytes down (or up), at least minBytes.
func biggest(recs []adminapi.TunnelRecord, down bool, n int, minBytes int64, since time.Time) []adminapi.TunnelRecord {
	moved := func(r adminapi.TunnelRecord) int64 {
		if down {
			return r.DownBytes
		}
		return r.UpBytes
	}
	var c []adminapi.TunnelRecord
	for _, r := range recs {
		if r.Frontend == "relay" && !r.EndedAt.Before(since) && moved(r) >= max(minBytes, 1) {
			c = append(c, r)
		}
	}
	sort.SliceStable(c, func(i, j int) bool { return moved(c[i]) > moved(c[j]) })
	return c[:min(n, len(c))]
}

// printSegments writes which limit each segment's sender met.
func printSegments(w io.Writer, segs []segmentLimit) {
	if len(segs) == 0 {
		return
	}
	fmt.Fprintln(w, "per segment, the sender's TCP_INFO over the chain's transfers: the receiver's window and the sender's send buffer, and the shares of its busy time the kernel counted as held back by each (it counts the send buffer only while nothing unsent is queued; the rest: congestion control):")
	for _, s := range segs {
		if !s.Seen {
			what := "not a relay"
			if s.From != "client" && s.From != "destination" {
				what = "its tunnels not found"
			}
			fmt.Fprintf(w, "  %-4s %s→%s: not seen (%s)\n", s.Direction, s.From, s.To, what)
			continue
		}
		fmt.Fprintf(w, "  %-4s %s→%s: rtt %.1f ms, receiver's window %d KB, send buffer %d KB: window-limited %.0f %%, send-buffer-limited %.0f %%, retransmits %d\n",
			s.Direction, s.From, s.To, s.RTTMs, s.PeerWindowBytes/1000, s.SendBufferBytes/1000, 100*s.RwndLimited, 100*s.SndbufLimited, s.Retransmits)
	}
}

// benchSegments reads the chain's tunnels after the bench's transfers and
// reports each segment's limits, per direction measured. A tunnel of the
// transfers moved at least half of the smallest stream's bytes (a timed
// transfer is cut by the bench, the relays may have moved a little more or
// less). The relays record a tunnel when it ends, a moment after the
// bench's side closed: it asks again for up to 2 s until each relay shows
// a tunnel per stream.
func benchSegments(ctx context.Context, admin adminGetter, token string, chain []string, relays map[string]registry.Relay, res *pathbench.Result, since time.Time) []segmentLimit {
	if res == nil || len(chain) == 0 {
		return nil
	}
	least := func(streams []pathbench.Stream) int64 {
		var m int64
		for i, s := range streams {
			if i == 0 || s.Bytes < m {
				m = s.Bytes
			}
		}
		return m / 2
	}
	down, up := len(res.DownStreams), len(res.UpStreams)
	downMin, upMin := least(res.DownStreams), least(res.UpStreams)
	deadline := time.Now().Add(2 * time.Second)
	var tunnels [][]adminapi.TunnelRecord
	for {
		tunnels = chainTunnels(ctx, admin, token, chain, relays)
		complete := true
		for _, recs := range tunnels {
			if len(biggest(recs, true, down, downMin, since)) < down || len(biggest(recs, false, up, upMin, since)) < up {
				complete = false
			}
		}
		if complete || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	var out []segmentLimit
	if down > 0 {
		out = append(out, segmentLimits(true, down, downMin, since, chain, tunnels)...)
	}
	if up > 0 {
		out = append(out, segmentLimits(false, up, upMin, since, chain, tunnels)...)
	}
	return out
}
