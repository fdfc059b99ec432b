package wanemu

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Injection is timing error added on purpose, to calibrate the self-check:
// how far does a measured figure move for a given error of the emulator?
// Injected delay is added to a packet's due time but counted as lateness
// (the packet is late against the link it was meant to emulate), so a run
// with an injection reports exactly what the self-check would see had the
// engine itself been that late. Every link a process creates gets it; the
// zero value injects nothing.
type Injection struct {
	// UniformNs adds a uniform random 0..UniformNs to every packet: a
	// steady share of late wake-ups, the engine's usual error under load.
	UniformNs int64
	// TailShare of packets (0..1) get TailNs more; the packets behind such
	// a packet wait for it (order is kept), as behind a late wake-up.
	TailShare float64
	TailNs    int64
	// Every StallEveryNs of the monotonic clock, every link direction is
	// held for StallNs: a host stall (the VM not running the engine).
	StallNs      int64
	StallEveryNs int64
}

// EnvInject is the environment variable ConfigFromEnv reads an Injection
// from: comma-separated terms "uniform=DUR", "tail=PCT%:DUR",
// "stall=DUR/EVERY", e.g. "tail=1%:2ms,stall=50ms/5s".
const EnvInject = "RELAYMESH_WANEMU_INJECT"

// Zero says whether nothing is injected.
func (in Injection) Zero() bool { return in == Injection{} }

// extraNs is what the injection adds to a packet due at dueNs.
func (in Injection) extraNs(dueNs int64) int64 {
	var extra int64
	if in.UniformNs > 0 {
		extra += rand.Int64N(in.UniformNs + 1)
	}
	if in.TailShare > 0 && rand.Float64() < in.TailShare {
		extra += in.TailNs
	}
	if in.StallNs > 0 && in.StallEveryNs > 0 {
		// A packet due inside a stall leaves when the stall ends.
		if phase := (dueNs + extra) % in.StallEveryNs; phase < in.StallNs {
			extra += in.StallNs - phase
		}
	}
	return extra
}

// String is the injection in EnvInject's syntax ("" when none).
func (in Injection) String() string {
	var terms []string
	if in.UniformNs > 0 {
		terms = append(terms, "uniform="+time.Duration(in.UniformNs).String())
	}
	if in.TailShare > 0 {
		terms = append(terms, fmt.Sprintf("tail=%g%%:%s", in.TailShare*100, time.Duration(in.TailNs)))
	}
	if in.StallNs > 0 {
		terms = append(terms, fmt.Sprintf("stall=%s/%s", time.Duration(in.StallNs), time.Duration(in.StallEveryNs)))
	}
	return strings.Join(terms, ",")
}

// ParseInjection reads EnvInject's syntax.
func ParseInjection(s string) (Injection, error) {
	var in Injection
	bad := func(term, want string) (Injection, error) {
		return Injection{}, fmt.Errorf("%s term %q: want %s", EnvInject, term, want)
	}
	for _, term := range strings.Split(s, ",") {
		term = strings.TrimSpace(term)
		if term == "" {
			continue
		}
		key, val, _ := strings.Cut(term, "=")
		switch key {
		case "uniform":
			d, err := time.ParseDuration(val)
			if err != nil || d <= 0 {
				return bad(term, "uniform=DURATION, e.g. uniform=300us")
			}
			in.UniformNs = int64(d)
		case "tail":
			pct, dur, ok := strings.Cut(val, ":")
			p, err1 := strconv.ParseFloat(strings.TrimSuffix(pct, "%"), 64)
			d, err2 := time.ParseDuration(dur)
			if !ok || !strings.HasSuffix(pct, "%") || err1 != nil || err2 != nil || p <= 0 || p > 100 || d <= 0 {
				return bad(term, "tail=PERCENT%:DURATION, e.g. tail=1%:2ms")
			}
			in.TailShare, in.TailNs = p/100, int64(d)
		case "stall":
			length, every, ok := strings.Cut(val, "/")
			l, err1 := time.ParseDuration(length)
			e, err2 := time.ParseDuration(every)
			if !ok || err1 != nil || err2 != nil || l <= 0 || e <= l {
				return bad(term, "stall=LENGTH/EVERY with EVERY longer, e.g. stall=50ms/5s")
			}
			in.StallNs, in.StallEveryNs = int64(l), int64(e)
		default:
			return bad(term, "uniform=, tail= or stall=")
		}
	}
	return in, nil
}
