package packettrain

import (
	"errors"
	"fmt"
	"slices"
)

// TCPPayloadShare is the share of a link's IP bytes a TCP flow's payload
// takes at the common MTU of 1,500 bytes (1,448 bytes of payload under 52
// of IP and TCP headers with timestamps): the planner's rates are TCP
// payload rates, a train measures the link's IP rate.
const TCPPayloadShare = 1448.0 / 1500

// minArrivalsPerTrain: a train with fewer arrivals (lost datagrams) is left
// out of the estimate.
const minArrivalsPerTrain = PacketsPerTrain / 2

// senderLimitedShare: a train that arrived at this share of the rate it
// was sent at or more was not slowed by the path: the sender was the
// bottleneck.
const senderLimitedShare = 0.8

// Estimate is a measurement's result.
type Estimate struct {
	// WireBps is the rate the bottleneck forwarded the trains at, IP
	// bytes, bits/s: the median of the trains' rates.
	WireBps float64 `json:"wire_bps"`
	// TCPBps is WireBps as a TCP flow's payload rate (TCPPayloadShare).
	TCPBps float64 `json:"tcp_bps"`
	// Trains is how many trains had enough arrivals to count.
	Trains int `json:"trains"`
	// SenderLimited says most trains arrived as fast as they were sent:
	// the path carries at least WireBps, maybe more.
	SenderLimited bool `json:"sender_limited,omitempty"`
}

// Estimate computes the capacity from a measurement's arrivals. Each
// train's rate is the Theil–Sen slope of arrival time against the bytes
// sent before each datagram (the median of the slopes between every two
// arrivals): a lost datagram costs its points only, and one arrival
// delayed by a stall (with those bunched behind it) moves a minority of
// the slopes and not their median, where the first-to-last dispersion
// would take the stall as a slower link. ipHeaderBytes is what IP and UDP
// added to each datagram (Arrivals.IPHeaderBytes).
func (a Arrivals) Estimate() (Estimate, error) {
	wireBytes := float64(PayloadBytes + a.IPHeaderBytes)
	byTrain := make([][]Arrival, Trains)
	for _, ar := range a.Arrivals {
		if ar.Train < 0 || ar.Train >= Trains || ar.Seq < 0 || ar.Seq >= PacketsPerTrain {
			return Estimate{}, fmt.Errorf("arrival train %d seq %d: out of range", ar.Train, ar.Seq)
		}
		byTrain[ar.Train] = append(byTrain[ar.Train], ar)
	}
	var rates []float64
	limited := 0
	for _, train := range byTrain {
		recvBps, sentBps, ok := trainRates(train, wireBytes)
		if !ok {
			continue
		}
		rates = append(rates, recvBps)
		if recvBps >= senderLimitedShare*sentBps {
			limited++
		}
	}
	if len(rates) == 0 {
		return Estimate{}, fmt.Errorf("%d datagrams arrived: no train had the %d of %d it needs", len(a.Arrivals), minArrivalsPerTrain, PacketsPerTrain)
	}
	wire := median(rates)
	return Estimate{WireBps: wire, TCPBps: wire * TCPPayloadShare, Trains: len(rates), SenderLimited: 2*limited > len(rates)}, nil
}

// trainRates is one train's arrival rate and send rate, bits/s of
// wireBytes datagrams; ok false with too few arrivals or no spread.
func trainRates(train []Arrival, wireBytes float64) (recvBps, sentBps float64, ok bool) {
	slices.SortFunc(train, func(a, b Arrival) int { return a.Seq - b.Seq })
	train = slices.CompactFunc(train, func(a, b Arrival) bool { return a.Seq == b.Seq })
	if len(train) < minArrivalsPerTrain {
		return 0, 0, false
	}
	recvNsPerByte, err1 := theilSen(train, wireBytes, func(a Arrival) int64 { return a.AtNs })
	sentNsPerByte, err2 := theilSen(train, wireBytes, func(a Arrival) int64 { return a.SentNs })
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return 8e9 / recvNsPerByte, 8e9 / sentNsPerByte, true
}

// errNoSpread: the times do not grow with the bytes (all at once, or out
// of order): no rate.
var errNoSpread = errors.New("no spread in time")

// theilSen is the median of the slopes, nanoseconds per byte, between
// every two datagrams of a train sorted by sequence number, of the time at
// reads against the bytes before each (seq·wireBytes).
func theilSen(train []Arrival, wireBytes float64, at func(Arrival) int64) (float64, error) {
	slopes := make([]float64, 0, len(train)*(len(train)-1)/2)
	for i := range train {
		for j := i + 1; j < len(train); j++ {
			dx := float64(train[j].Seq-train[i].Seq) * wireBytes
			slopes = append(slopes, float64(at(train[j])-at(train[i]))/dx)
		}
	}
	m := median(slopes)
	if !(m > 0) {
		return 0, errNoSpread
	}
	return m, nil
}

// median of xs (not empty); xs is sorted in place.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
