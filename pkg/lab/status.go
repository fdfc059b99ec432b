package lab

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/lab/topology"
	"github.com/relaymesh/relaymesh/pkg/lab/wanemu"
)

// Status is a running lab's live view: what `relayctl lab status` prints.
type Status struct {
	Name      string       `json:"name"`
	PID       int          `json:"pid"`
	UptimeS   float64      `json:"uptime_s"`
	Nodes     []NodeStatus `json:"nodes"`
	Links     []LinkStatus `json:"links"`
	Valid     bool         `json:"valid"`              // self-check verdict
	Problems  []string     `json:"problems,omitempty"` // why not valid
	Check     Check        `json:"check"`              // how the verdict was reached
	FleetPath string       `json:"fleet"`
	// Engine is the packet engine's configuration and, for the sched
	// engine, its threads' own counters: where lateness and CPU come from.
	Engine       string              `json:"engine"`
	EngineShards []wanemu.ShardStats `json:"engine_shards,omitempty"`
}

// EngineSummary is one line per engine thread for a person: CPU, wake-up
// latency, and packets per system call.
func EngineSummary(engine string, shards []wanemu.ShardStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "engine %s", engine)
	for _, sh := range shards {
		fmt.Fprintf(&b, "\n  shard %d (%s, %d link directions): CPU %.2f s, wake-up late p50 %.0f us p99 %.0f us max %.2f ms over %d sleeps, longest busy stretch %.2f ms, read %.2f ms, write %.2f ms, %d reads (%d super-packets) and %d writes (%d joined) for %d packets in, %d out, standby took over %d times",
			sh.Shard, sh.ThreadPolicy, sh.Directions, float64(sh.CPUNs)/1e9, float64(sh.WakeLateP50)/1e3, float64(sh.WakeLateP99)/1e3,
			float64(sh.WakeLateMax)/1e6, sh.Sleeps, float64(sh.MaxBusyNs)/1e6, float64(sh.MaxReadNs)/1e6, float64(sh.MaxWriteNs)/1e6, sh.Reads, sh.SuperReads, sh.Writes, sh.SuperWrites, sh.SegmentsIn, sh.SegmentsOut, sh.Takeovers)
	}
	return b.String()
}

// NodeStatus is one node and its service.
type NodeStatus struct {
	Node
	Service string `json:"service,omitempty"` // "relayd", "traffic" or ""
	Running bool   `json:"running"`
	Log     string `json:"log,omitempty"`
}

// LinkStatus is one link's configuration and live statistics per direction
// (AB: from Between[0] to Between[1]).
type LinkStatus struct {
	Between  [2]string    `json:"between"`
	DelayMs  [2]float64   `json:"delay_ms"`
	RateMbit float64      `json:"rate_mbit"`
	Loss     float64      `json:"loss"`
	AB       wanemu.Stats `json:"ab"`
	BA       wanemu.Stats `json:"ba"`
	// Effect is what the link's timing error can do to a figure measured
	// across it, against the lab's Check.
	Effect  wanemu.LinkEffect `json:"effect"`
	Problem string            `json:"problem,omitempty"`
}

// Status reads the live state of the lab.
func (l *Lab) Status() Status {
	st := Status{Name: l.Name, PID: l.PID, UptimeS: time.Since(l.Started).Seconds(), FleetPath: l.FleetPath(), Valid: true,
		Engine: wanemu.CurrentConfig().String(), EngineShards: wanemu.EngineStats()}
	l.mu.Lock() // procs and link settings (UpdateLink) change under it
	defer l.mu.Unlock()
	services := map[string]*proc{}
	for _, p := range l.procs {
		services[p.node] = p
	}
	for _, name := range l.nodeNames() {
		ns := NodeStatus{Node: *l.Nodes[name]}
		if p := services[name]; p != nil {
			ns.Service, ns.Log = p.what, p.logPath
			select {
			case <-p.done:
				st.Valid = false
				st.Problems = append(st.Problems, fmt.Sprintf("node %s: %s exited (%v)", name, p.what, p.err))
			default:
				ns.Running = true
			}
		}
		st.Nodes = append(st.Nodes, ns)
	}
	v := l.verdictLocked(l.opts.Check)
	st.Check = v.Check
	st.Valid = st.Valid && v.Valid
	st.Problems = append(st.Problems, v.Problems...)
	for i, rl := range l.links {
		ab, ba := rl.link.Stats()
		abNs, baNs := rl.cfg.OneWayNs()
		st.Links = append(st.Links, LinkStatus{Between: rl.cfg.Between, DelayMs: [2]float64{float64(abNs) / 1e6, float64(baNs) / 1e6},
			RateMbit: cmp.Or(rl.cfg.RateMbit, topology.DefaultRateMbit), Loss: rl.cfg.Loss, AB: ab, BA: ba,
			Effect: v.Links[i].Effect, Problem: v.Links[i].Problem})
	}
	return st
}

func controlPath(dir string) string { return filepath.Join(dir, "control.sock") }

// ServeControl answers `relayctl lab status` from other processes on a unix
// socket in the lab's directory until ctx ends. It returns once the socket
// listens; serving goes on in the background.
func (l *Lab) ServeControl(ctx context.Context) error {
	path := controlPath(l.Dir)
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(l.Status())
	})
	mux.HandleFunc("POST /link", func(w http.ResponseWriter, r *http.Request) {
		var u LinkUpdate
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&u); err != nil {
			http.Error(w, "link update: "+err.Error(), http.StatusBadRequest)
			return
		}
		lc, err := l.UpdateLink(u)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		l.log.Info("link changed", zap.Strings("between", lc.Between[:]), zap.Float64("rtt_ms", lc.RTTMs),
			zap.Float64s("delay_ms", lc.DelayMs), zap.Float64("rate_mbit", lc.RateMbit), zap.Float64("loss", lc.Loss))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(lc)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
		os.Remove(path)
	}()
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			l.log.Error("control socket", zap.Error(err))
		}
	}()
	return nil
}

func controlClient(s *State) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", controlPath(s.Dir))
		},
	}, Timeout: 10 * time.Second}
}

// control makes one request to a running lab's process and decodes its JSON
// answer into out.
func control(ctx context.Context, s *State, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://lab"+path, rd)
	if err != nil {
		return err
	}
	resp, err := controlClient(s).Do(req)
	if err != nil {
		return fmt.Errorf("lab %s (pid %d) does not answer on %s: %w", s.Name, s.PID, controlPath(s.Dir), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("lab %s: %s", s.Name, strings.TrimSpace(string(msg)))
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("lab %s %s: %w", s.Name, path, err)
	}
	return nil
}

// FetchStatus asks a running lab's process for its status.
func FetchStatus(ctx context.Context, s *State) (*Status, error) {
	var st Status
	if err := control(ctx, s, http.MethodGet, "/status", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// RequestLinkUpdate asks a running lab's process to change a link.
func RequestLinkUpdate(ctx context.Context, s *State, u LinkUpdate) (*topology.Link, error) {
	var lc topology.Link
	if err := control(ctx, s, http.MethodPost, "/link", u, &lc); err != nil {
		return nil, err
	}
	return &lc, nil
}
