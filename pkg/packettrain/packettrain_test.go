package packettrain

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
)

// bottleneck sends one measurement's trains, a datagram every sendGapNs,
// through a link that serializes at rateBps with a FIFO (as pkg/lab/wanemu's
// rate queue does: departure = max(arrival, last departure) + size/rate),
// trains 50 ms apart, and returns the arrivals of the datagrams keep lets
// through, timed from the first.
func bottleneck(rateBps float64, sendGapNs int64, headerBytes int, keep func(train, seq int) bool) Arrivals {
	wire := float64(PayloadBytes + headerBytes)
	var out Arrivals
	out.IPHeaderBytes = headerBytes
	var lastDepartNs float64
	for t := range Trains {
		for s := range PacketsPerTrain {
			sent := int64(t)*50e6 + int64(s)*sendGapNs
			depart := math.Max(float64(sent), lastDepartNs) + wire*8*1e9/rateBps
			lastDepartNs = depart
			if keep == nil || keep(t, s) {
				out.Arrivals = append(out.Arrivals, Arrival{Train: t, Seq: s, SentNs: sent, AtNs: int64(depart) + 20e6})
			}
		}
	}
	return out
}

func within(t *testing.T, what string, got, want, share float64) {
	t.Helper()
	if math.Abs(got-want) > share*want {
		t.Errorf("%s = %.4g, want %.4g ± %.0f%%", what, got, want, share*100)
	}
}

func TestEstimateBottleneck(t *testing.T) {
	for _, rate := range []float64{10e6, 100e6, 1e9} {
		a := bottleneck(rate, 2000, 28, nil) // the sender writes at 4.9 Gbit/s
		e, err := a.Estimate()
		if err != nil {
			t.Fatal(err)
		}
		within(t, "wire rate", e.WireBps, rate, 0.01)
		within(t, "TCP rate", e.TCPBps, rate*TCPPayloadShare, 0.01)
		if e.SenderLimited || e.Trains != Trains {
			t.Errorf("rate %g: sender limited %v, %d trains; want false, %d", rate, e.SenderLimited, e.Trains, Trains)
		}
	}
}

// A stalled receiver (a VM's vCPU descheduled) timestamps what arrived
// during the stall at its end. A long stall (20 ms) in one train bunches
// most of it: the median over the trains leaves that train out. A short
// one (3 ms, over the last five datagrams) in every train: each train's
// Theil–Sen slope holds. First-to-last dispersion takes either for a
// slower link.
func TestEstimateStalledSample(t *testing.T) {
	const rate = 100e6
	stall := func(a Arrivals, train func(int) bool, fromSeq int, stallNs int64) Arrivals {
		var endNs int64
		for i := range a.Arrivals {
			ar := &a.Arrivals[i]
			if !train(ar.Train) {
				continue
			}
			if ar.Seq == fromSeq {
				endNs = ar.AtNs + stallNs
			}
			if ar.Seq >= fromSeq && ar.AtNs < endNs {
				ar.AtNs = endNs
			}
		}
		return a
	}
	long := stall(bottleneck(rate, 2000, 28, nil), func(tr int) bool { return tr == 1 }, 5, 20e6)
	short := stall(bottleneck(rate, 2000, 28, nil), func(int) bool { return true }, 35, 3e6)
	for name, a := range map[string]Arrivals{"20 ms in one train": long, "3 ms at the end of every train": short} {
		e, err := a.Estimate()
		if err != nil {
			t.Fatal(err)
		}
		within(t, name, e.WireBps, rate, 0.03)
		if d := dispersion(a); d > 0.8*rate {
			t.Errorf("%s: first-to-last dispersion gives %.4g: the stall tests nothing", name, d)
		}
	}
}

// dispersion is the naive estimate: the trains' bytes after their first
// datagram over the time from their first to their last arrival, summed.
func dispersion(a Arrivals) float64 {
	var bytes, ns float64
	for tr := range Trains {
		var first, last *Arrival
		n := 0
		for i := range a.Arrivals {
			ar := &a.Arrivals[i]
			if ar.Train != tr {
				continue
			}
			n++
			if first == nil || ar.Seq < first.Seq {
				first = ar
			}
			if last == nil || ar.Seq > last.Seq {
				last = ar
			}
		}
		bytes += float64((n - 1) * (PayloadBytes + a.IPHeaderBytes))
		ns += float64(last.AtNs - first.AtNs)
	}
	return bytes * 8e9 / ns
}

func TestEstimateLoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	a := bottleneck(50e6, 2000, 48, func(int, int) bool { return rng.Float64() > 0.3 })
	e, err := a.Estimate()
	if err != nil {
		t.Fatal(err)
	}
	within(t, "wire rate under 30% loss", e.WireBps, 50e6, 0.01)
}

// A path faster than the sender writes: the trains arrive as they were
// sent, and the estimate says it is a lower bound.
func TestEstimateSenderLimited(t *testing.T) {
	gapNs := int64((PayloadBytes + 28) * 8 * 1e9 / 200e6) // the sender writes 200 Mbit/s
	a := bottleneck(10e9, gapNs, 28, nil)
	e, err := a.Estimate()
	if err != nil {
		t.Fatal(err)
	}
	if !e.SenderLimited {
		t.Errorf("sender limited false at %.4g bits/s", e.WireBps)
	}
	within(t, "sender-limited rate", e.WireBps, 200e6, 0.02)
}

func TestEstimateRefuses(t *testing.T) {
	few := bottleneck(100e6, 2000, 28, func(_, seq int) bool { return seq < minArrivalsPerTrain-1 })
	if _, err := few.Estimate(); err == nil {
		t.Error("trains with too few arrivals: no error")
	}
	bad := Arrivals{Arrivals: []Arrival{{Train: Trains, Seq: 0}}}
	if _, err := bad.Estimate(); err == nil {
		t.Error("a train out of range: no error")
	}
	same := bottleneck(100e6, 2000, 28, nil)
	for i := range same.Arrivals {
		same.Arrivals[i].AtNs = 5
	}
	if _, err := same.Estimate(); err == nil {
		t.Error("every arrival at once: no error")
	}
}

func TestDatagramRoundTrip(t *testing.T) {
	d := Datagram{Nonce: NewNonce(), Train: 2, Seq: 39, SentNs: 123456789}
	b := d.Marshal(nil)
	if len(b) != PayloadBytes {
		t.Fatalf("len %d, want %d", len(b), PayloadBytes)
	}
	got, err := Parse(b)
	if err != nil || got != d {
		t.Fatalf("Parse = %+v, %v; want %+v", got, err, d)
	}
	for name, b := range map[string][]byte{
		"short":     b[:PayloadBytes-1],
		"magic":     append([]byte("XXXX"), b[4:]...),
		"version":   append(append(bytes.Clone(b[:4]), 9), b[5:]...),
		"train":     Datagram{Train: Trains}.Marshal(nil),
		"seq":       Datagram{Seq: PacketsPerTrain}.Marshal(nil),
		"too long":  append(bytes.Clone(b), 0),
		"empty":     nil,
		"zero fill": make([]byte, PayloadBytes),
	} {
		if _, err := Parse(b); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	n, err := ParseNonce(d.Nonce.String())
	if err != nil || n != d.Nonce {
		t.Errorf("ParseNonce(String) = %v, %v", n, err)
	}
	if _, err := ParseNonce("abcd"); err == nil {
		t.Error("a short nonce parsed")
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Datagram{Train: 1, Seq: 3}.Marshal(nil))
	f.Add([]byte("RMPT"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Parse(b)
		if err != nil {
			return
		}
		again, err := Parse(d.Marshal(nil))
		if err != nil || again != d {
			t.Fatalf("round trip of %+v: %+v, %v", d, again, err)
		}
	})
}
