package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/relaymesh/relaymesh/pkg/pathbench"
	"github.com/relaymesh/relaymesh/planner"
)

// windowProbe is what a receive-window probe found.
type windowProbe struct {
	Relay       string `json:"relay"`        // the first relay downloaded from
	Bytes       int64  `json:"bytes"`        // downloaded
	WindowBytes uint32 `json:"window_bytes"` // this host's advertised receive window at the end
	// AssumedBytes is what the plan had assumed for this host's window
	// (tcp_rmem max × 0.6).
	AssumedBytes int64  `json:"assumed_bytes"`
	Error        string `json:"error,omitempty"`
}

func (w windowProbe) String() string {
	if w.Error != "" {
		return fmt.Sprintf("receive window on client→%s not measured (%s); assumed %.1f KB", w.Relay, w.Error, float64(w.AssumedBytes)/1000)
	}
	return fmt.Sprintf("receive window on client→%s measured: %.1f KB after %.1f MB from it (assumed from tcp_rmem: %.1f KB)",
		w.Relay, float64(w.WindowBytes)/1000, float64(w.Bytes)/1e6, float64(w.AssumedBytes)/1000)
}

// probeWindow measures this host's receive window on the segment to
// chain's first relay (unless measured already) and plans again with it
// on that pair. How much of tcp_rmem's max the kernel turns into window
// depends on the path, and on a chain's first segment the client's own
// window is often the bottleneck. If the new plan starts at another relay,
// that one is measured too, once.
func (p *planned) probeWindow(ctx context.Context, f *planFlags, chain []string) {
	for range 2 {
		if len(chain) == 0 || p.Matrix == nil {
			return
		}
		first := chain[0]
		for _, w := range p.Windows {
			if w.Relay == first {
				return
			}
		}
		w := measureClientWindow(ctx, f, p, first)
		p.Windows = append(p.Windows, w)
		p.Notes = append(p.Notes, w.String())
		if w.Error != "" || !p.setPairWindow(first, int64(w.WindowBytes)) {
			return
		}
		res, err := planner.Search(p.Matrix, p.Request)
		if err != nil {
			p.Windows[len(p.Windows)-1].Error = err.Error()
			return
		}
		p.Result = res
		chain = res.Best.Chain
	}
}

// setPairWindow records windowBytes as this host's receive window on its
// pair with relay; false when the matrix has no such pair.
func (p *planned) setPairWindow(relay string, windowBytes int64) bool {
	client := p.Request.Client
	for i := range p.Matrix.Pairs {
		pr := &p.Matrix.Pairs[i]
		switch {
		case pr.A == client && pr.B == relay:
			pr.AWindowBytes = windowBytes
			return true
		case pr.B == client && pr.A == relay:
			pr.BWindowBytes = windowBytes
			return true
		}
	}
	return false
}

// measureClientWindow downloads f.windowProbeBytes from relay's admin API,
// directly, and reads the receive window this host's socket advertised at
// the end (pathbench.Run.ReceiveWindow).
func measureClientWindow(ctx context.Context, f *planFlags, p *planned, relay string) windowProbe {
	wp := windowProbe{Relay: relay, Bytes: f.windowProbeBytes}
	for _, n := range p.Matrix.Nodes {
		if n.Name == p.Request.Client {
			wp.AssumedBytes = n.WindowBytes
		}
	}
	r, ok := p.Relays[relay]
	if !ok || r.Admin == "" {
		wp.Error = "no admin address"
		return wp
	}
	conf, err := f.reg.adminTLS()
	if err != nil {
		wp.Error = err.Error()
		return wp
	}
	run := &pathbench.Run{Target: r.Admin, Prefix: "/v1/traffic", Token: f.token(), Relay: r.Name, AdminTLS: conf}
	var d net.Dialer
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := run.ReceiveWindow(cctx, pathbench.Path{Name: "window", Dial: func(ctx context.Context) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", r.Admin)
	}}, f.windowProbeBytes)
	if err != nil {
		wp.Error = err.Error()
		return wp
	}
	wp.WindowBytes = w
	return wp
}
