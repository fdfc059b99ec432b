package probe

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestWindowSummary(t *testing.T) {
	w := NewWindow(5)
	at := time.Unix(1000, 0)
	// Oldest two fall out of the window of 5.
	for i, ms := range []float64{900, 900, 10, 12, -1, 11, 20} {
		var err error
		if ms < 0 {
			err = errors.New("timeout")
		}
		w.Add(time.Duration(ms*1e6), err, at.Add(time.Duration(i)*time.Second))
	}
	s := w.Summary()
	// Window: 10, 12, lost, 11, 20.
	if s.Samples != 5 || s.Lost != 1 || s.Loss != 0.2 {
		t.Fatalf("samples %d lost %d loss %v", s.Samples, s.Lost, s.Loss)
	}
	if s.MinMs != 10 || s.MedianMs != 12 || s.P90Ms != 20 {
		t.Fatalf("min %v median %v p90 %v", s.MinMs, s.MedianMs, s.P90Ms)
	}
	// Consecutive answered RTTs 10, 12, 11, 20: |2| + |1| + |9| over 3.
	if math.Abs(s.JitterMs-4) > 1e-9 {
		t.Fatalf("jitter %v, want 4", s.JitterMs)
	}
	if !s.LastAt.Equal(at.Add(6*time.Second)) || s.LastErr != "" || !s.Reachable() {
		t.Fatalf("last %v err %q", s.LastAt, s.LastErr)
	}
}

// A run of OutageRun or more lost samples is an outage: it counts in Lost
// and OutageLost, not in Loss; shorter runs are loss.
func TestWindowOutageIsNotLoss(t *testing.T) {
	w := NewWindow(12)
	at := time.Unix(1000, 0)
	// 10, lost, 11, lost, lost, lost, lost, 12, lost, lost, 13, 14: one
	// outage of 4, loss 3 of the other 8.
	for i, ms := range []float64{10, -1, 11, -1, -1, -1, -1, 12, -1, -1, 13, 14} {
		var err error
		if ms < 0 {
			err = errors.New("timeout")
		}
		w.Add(time.Duration(ms*1e6), err, at.Add(time.Duration(i)*2*time.Second))
	}
	s := w.Summary()
	if s.Samples != 12 || s.Lost != 7 || s.OutageLost != 4 || s.Loss != 3.0/8 || !s.Reachable() {
		t.Fatalf("%+v: want 12 samples, 7 lost, 4 of them an outage, loss 3/8", s)
	}
	// An outage going on at the window's end: LastErr says so, Loss
	// leaves it out.
	for i := range OutageRun {
		w.Add(0, errors.New("timeout"), at.Add(time.Duration(30+i)*time.Second))
	}
	if s := w.Summary(); s.OutageLost != 4+OutageRun || s.LastErr != "timeout" {
		t.Fatalf("%+v: want the new run counted as an outage and LastErr set", s)
	}
}

func TestWindowAllLost(t *testing.T) {
	w := NewWindow(3)
	w.Add(0, errors.New("connection refused"), time.Now())
	s := w.Summary()
	if s.Reachable() || s.Loss != 1 || s.LastErr != "connection refused" || s.MedianMs != 0 {
		t.Fatalf("%+v", s)
	}
}

// The prober samples every target each round, follows target changes, and
// measures a real TCP handshake on loopback.
func TestProber(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := closed.Addr().String()
	closed.Close()
	var targets atomic.Value
	targets.Store(map[string]string{"up": ln.Addr().String(), "down": deadAddr})
	p := &Prober{Interval: 20 * time.Millisecond, Targets: func() map[string]string { return targets.Load().(map[string]string) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	waitFor := func(cond func(map[string]Summary) bool) map[string]Summary {
		deadline := time.Now().Add(5 * time.Second)
		for {
			snap := p.Snapshot()
			if cond(snap) {
				return snap
			}
			if time.Now().After(deadline) {
				t.Fatalf("condition not met; snapshot %+v", snap)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	snap := waitFor(func(s map[string]Summary) bool { return s["up"].Samples >= 3 && s["down"].Samples >= 3 })
	if up := snap["up"]; up.Lost != 0 || up.MedianMs <= 0 || up.MedianMs > 50 {
		t.Fatalf("up: %+v", up)
	}
	// Nothing listens on "down": the path answers (RST), the service not.
	if down := snap["down"]; !strings.Contains(down.LastErr, "refused") {
		t.Fatalf("down: %+v", down)
	}
	targets.Store(map[string]string{"up": ln.Addr().String()})
	waitFor(func(s map[string]Summary) bool { _, ok := s["down"]; return !ok })
	cancel()
	<-done
}

// A refused connect measured the path (the RST took one round trip): it
// counts as an RTT sample, not loss, and is reported as the last error.
func TestRefusedIsAnsweredPathNotHealthyService(t *testing.T) {
	w := NewWindow(3)
	w.Add(10*time.Millisecond, nil, time.Now())
	w.Add(12*time.Millisecond, syscall.ECONNREFUSED, time.Now())
	s := w.Summary()
	if s.Lost != 0 || s.MedianMs != 12 || s.LastErr == "" {
		t.Fatalf("%+v", s)
	}
	w.Add(11*time.Millisecond, nil, time.Now())
	if s := w.Summary(); s.LastErr != "" {
		t.Fatalf("last error after an answer: %q", s.LastErr)
	}
}
