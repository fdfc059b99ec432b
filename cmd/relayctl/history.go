package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/relaymesh/relaymesh/pkg/survey"
	"github.com/relaymesh/relaymesh/planner"
)

// What relayctl bench's history teaches a plan: the rate the destination's
// traffic to this host reached over the direct path, where no window held
// it. The relays learn what their own sends reach (from the tunnels they
// carry), but nobody else sees the direct path; a timed download does. A
// plan that knew only windows would predict direct at its window's rate
// over a slow access link or a rate-limited server, and take a chain for a
// gain that is not there (or miss one).

// historyMaxAge is how old a bench may be and still bound a plan: a path's
// capacity changes slowly, but a bench from another day may have run from
// another network.
const historyMaxAge = time.Hour

// historyWindowShare: a download whose steady rate stayed below this share
// of what the client's receive window allowed over the path's RTT was held
// by something else, the path's capacity (or its loss); above it, the
// window may have held it and the rate says nothing of the path.
const historyWindowShare = 0.8

// maxHistoryLineBytes bounds one history line (a bench with many streams
// and segments is a few KB).
const maxHistoryLineBytes = 1 << 20

// historyRate is a direct download's steady rate from the history.
type historyRate struct {
	bps    float64
	ageSec float64
	at     time.Time
}

// directCapacity reads bench history lines from r and returns the newest
// direct download, within historyMaxAge of now, that the same registry
// (registryID, registryFlags.id) timed against target (host:port) and that
// no window held: its steady rate below historyWindowShare of its streams'
// receive windows over rttMs, the direct path's RTT as measured now (not
// the streams' own smoothed RTT, which a standing queue at a bottleneck
// inflates until the window looks like the limit). Lines it cannot parse
// are skipped: the file is appended to by every bench, old and new.
func directCapacity(r io.Reader, registryID, target string, rttMs float64, now time.Time) (historyRate, bool, error) {
	var best historyRate
	found := false
	if !(rttMs > 0) || registryID == "" {
		return best, false, nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxHistoryLineBytes)
	for sc.Scan() {
		var b benchJSON
		if json.Unmarshal(sc.Bytes(), &b) != nil {
			continue
		}
		age := now.Sub(b.Time)
		if b.Registry != registryID || b.Target != target || age < 0 || age > historyMaxAge || (found && !b.Time.After(best.at)) {
			continue
		}
		d := b.Direct
		if d == nil || len(d.Errors) > 0 || !(d.DownSteadyBps > 0) {
			continue
		}
		windowBps := 0.0
		for _, s := range d.DownStreams {
			windowBps += float64(s.RcvWindowBytes) * 8 / (rttMs / 1000)
		}
		if !(windowBps > 0) || d.DownSteadyBps >= historyWindowShare*windowBps {
			continue
		}
		best, found = historyRate{bps: d.DownSteadyBps, ageSec: age.Seconds(), at: b.Time}, true
	}
	if err := sc.Err(); err != nil {
		return best, found, err
	}
	return best, found, nil
}

// boundDirect sets the destination's learnt send rate to the client on
// their pair in m (the direct path of a download), unless a lower one is
// known. It reports whether it did.
func boundDirect(m *planner.Matrix, client, dst string, h historyRate) bool {
	for i := range m.Pairs {
		p := &m.Pairs[i]
		switch {
		case p.A == dst && p.B == client && (p.ASendBps == 0 || h.bps < p.ASendBps):
			p.ASendBps, p.ASendAgeSec, p.ASendSource = h.bps, h.ageSec, planner.LearntFromBench
			return true
		case p.B == dst && p.A == client && (p.BSendBps == 0 || h.bps < p.BSendBps):
			p.BSendBps, p.BSendAgeSec, p.BSendSource = h.bps, h.ageSec, planner.LearntFromBench
			return true
		}
	}
	return false
}

// applyHistory bounds the direct path of m by the bench history at path
// ("" or a missing file: nothing), for a download from target, and returns
// a note saying so ("" when it did not).
func applyHistory(m *planner.Matrix, path, registryID, client, target, dst string, now time.Time) (string, error) {
	if path == "" {
		return "", nil
	}
	rttMs := 0.0
	for _, p := range m.Pairs {
		if (p.A == client && p.B == dst) || (p.A == dst && p.B == client) {
			rttMs = p.RTTMs
		}
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	h, ok, err := directCapacity(f, registryID, target, rttMs, now)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if !ok || !boundDirect(m, client, dst, h) {
		return "", nil
	}
	return fmt.Sprintf("direct: a download from %s reached %.1f Mbit/s in relayctl bench %s ago, below what the windows allow: the plan bounds direct by it (--bench-history %s)",
		target, h.bps/1e6, time.Duration(h.ageSec*float64(time.Second)).Round(time.Second), path), nil
}

// plansDir is where plan and bench keep what their shortlist plans learnt
// (--plans-dir), beside the bench history.
func plansDir() string {
	if h := historyPath(); h != "" {
		return filepath.Join(filepath.Dir(h), "plans")
	}
	return ""
}

// plansFile names the file of one fleet's kept plans (registryFlags.id):
// a plan of one fleet must not start from another's relays.
func plansFile(registryID string) string {
	sum := sha256.Sum256([]byte(registryID))
	return hex.EncodeToString(sum[:8]) + ".json"
}

// keptPlans returns the plans kept at path (none when it does not exist
// or does not parse: the next keep writes it anew) and keep, which writes
// them back, whole, through a temporary file renamed over it (two runs at
// once: the last one's stay).
func keptPlans(path string) (*survey.Replans, func() error) {
	r := &survey.Replans{}
	if f, err := os.Open(path); err == nil {
		if r.Load(f) != nil {
			r = &survey.Replans{}
		}
		f.Close()
	}
	return r, func() error {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		tmp, err := os.CreateTemp(filepath.Dir(path), ".plans-*")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name())
		if err := r.Save(tmp); err != nil {
			tmp.Close()
			return err
		}
		if err := tmp.Close(); err != nil {
			return err
		}
		return os.Rename(tmp.Name(), path)
	}
}
