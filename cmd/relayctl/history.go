package main

import (
	"bufio"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/relaymesh/relaymesh/pkg/pathbench"
	"github.com/relaymesh/relaymesh/pkg/survey"
	"github.com/relaymesh/relaymesh/planner"
)

// What relayctl bench's history teaches a plan: how fast the paths it
// timed moved. A plan over a path bench timed in the last hour (from this
// host, against the same destination, in the same fleet, one stream, as a
// plan models) predicts the lower of the model's rate and the measured
// steady one, and is not a bound: whatever the model did not know (a
// capacity, a loss), the transfer met. Nobody but the client carries the
// direct path's traffic, or its own segment's; a timed transfer sees
// them. A chain measured to beat direct is not displaced by an untried
// one whose prediction is only a bound (planner.Request.Measured).

// historyMaxAge is how old a bench may be and still count: a path's
// capacity changes slowly, but a bench from another day may have run from
// another network, or with other windows.
const historyMaxAge = time.Hour

// maxHistoryLineBytes bounds one history line (a bench with many streams
// and segments is a few KB).
const maxHistoryLineBytes = 1 << 20

// benchHistory is what the bench history says of the paths to one
// destination.
type benchHistory struct {
	measured []planner.Measurement
	// dstWindowBytes is the largest window the destination advertised to
	// the newest direct upload (TCP_INFO snd_wnd of this host's socket),
	// bytes; 0 = none timed. dstWindowAgeSec is how old.
	dstWindowBytes  int64
	dstWindowAgeSec float64
}

// readBenchHistory reads bench history lines from r: per path (direct, or
// a chain by its relays) and direction, the newest steady rate that the
// same registry (registryID, registryFlags.id) timed against target
// (host:port) with one stream, without errors, within historyMaxAge of
// now; and the window the destination advertised to the newest such
// direct upload. Lines it cannot parse are skipped: the file is appended
// to by every bench, old and new.
func readBenchHistory(r io.Reader, registryID, target string, now time.Time) (benchHistory, error) {
	var h benchHistory
	if registryID == "" {
		return h, nil
	}
	type key struct {
		path string
		dir  planner.Direction
	}
	newest := map[key]planner.Measurement{}
	add := func(relays []string, dir planner.Direction, streams int, steadyBps, ageSec float64) {
		if streams == 0 || !(steadyBps > 0) {
			return
		}
		k := key{strings.Join(relays, ","), dir}
		if old, ok := newest[k]; !ok || ageSec < old.AgeSec {
			newest[k] = planner.Measurement{Chain: append([]string{}, relays...), Direction: dir, SteadyBps: steadyBps, AgeSec: ageSec}
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxHistoryLineBytes)
	for sc.Scan() {
		var b benchJSON
		if json.Unmarshal(sc.Bytes(), &b) != nil {
			continue
		}
		age := now.Sub(b.Time)
		if b.Registry != registryID || b.Target != target || age < 0 || age > historyMaxAge || b.Streams > 1 {
			continue
		}
		for _, path := range []*pathbench.Result{b.Direct, b.Chain, b.Explored} {
			if path == nil || len(path.Errors) > 0 {
				continue
			}
			add(path.Relays, planner.Down, len(path.DownStreams), path.DownSteadyBps, age.Seconds())
			add(path.Relays, planner.Up, len(path.UpStreams), path.UpSteadyBps, age.Seconds())
		}
		if d := b.Direct; d != nil && len(d.Errors) == 0 && len(d.UpStreams) == 1 && d.UpStreams[0].PeerWindowBytes > 0 &&
			(h.dstWindowBytes == 0 || age.Seconds() < h.dstWindowAgeSec) {
			h.dstWindowBytes, h.dstWindowAgeSec = int64(d.UpStreams[0].PeerWindowBytes), age.Seconds()
		}
	}
	h.measured = make([]planner.Measurement, 0, len(newest))
	for _, m := range newest {
		h.measured = append(h.measured, m)
	}
	slices.SortFunc(h.measured, func(a, b planner.Measurement) int {
		return cmp.Or(slices.Compare(a.Chain, b.Chain), strings.Compare(string(a.Direction), string(b.Direction)))
	})
	return h, sc.Err()
}

// readHistory reads the bench history at path ("" or a missing file:
// nothing) for plans against target.
func readHistory(path, registryID, target string, now time.Time) (benchHistory, error) {
	if path == "" {
		return benchHistory{}, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return benchHistory{}, nil
	}
	if err != nil {
		return benchHistory{}, err
	}
	defer f.Close()
	h, err := readBenchHistory(f, registryID, target, now)
	if err != nil {
		return h, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

// ago is a history age for a note, to the second.
func ago(sec float64) time.Duration {
	return time.Duration(sec * float64(time.Second)).Round(time.Second)
}

// note says which paths to target h measured, read from path; "" when
// none.
func (h benchHistory) note(target, path string) string {
	var paths []string
	for _, m := range h.measured {
		name := "direct"
		if len(m.Chain) > 0 {
			name = strings.Join(m.Chain, ",")
		}
		paths = append(paths, fmt.Sprintf("%s %s %.1f Mbit/s %s ago", name, m.Direction, m.SteadyBps/1e6, ago(m.AgeSec)))
	}
	if len(paths) == 0 {
		return ""
	}
	return fmt.Sprintf("relayctl bench timed %d path%s to %s in the last hour (%s): their plans predict no more than that (--bench-history %s)",
		len(paths), map[bool]string{true: "s"}[len(paths) > 1], target, strings.Join(paths, "; "), path)
}

// applyDstWindow sets the window of m's destination node dst to the one h
// learnt, where the survey did not know it or took it from this host's
// own sends (own, relayctl connect's; nil: it did not) longer ago than
// the bench: the newer of the two wins. It returns a note saying so (""
// when it did not).
func (h benchHistory) applyDstWindow(m *planner.Matrix, dst, target string, own *survey.OwnWindow) string {
	if h.dstWindowBytes <= 0 {
		return ""
	}
	for i := range m.Nodes {
		n := &m.Nodes[i]
		if n.Name != dst {
			continue
		}
		switch {
		case n.WindowBytes == 0:
			n.WindowBytes = h.dstWindowBytes
			return fmt.Sprintf("%s advertised a %d-byte window to a direct upload relayctl bench timed %s ago: the plan takes it as the destination's window",
				target, h.dstWindowBytes, ago(h.dstWindowAgeSec))
		case own != nil && n.WindowBytes == own.Bytes && h.dstWindowAgeSec < own.AgeSec:
			n.WindowBytes = h.dstWindowBytes
			return fmt.Sprintf("%s advertised a %d-byte window to a direct upload relayctl bench timed %s ago, after the %d bytes learnt from relayctl connect's traffic %s ago: the plan takes the bench's",
				target, h.dstWindowBytes, ago(h.dstWindowAgeSec), own.Bytes, ago(own.AgeSec))
		}
	}
	return ""
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
