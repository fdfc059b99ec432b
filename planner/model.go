package planner

import (
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Defaults. Every field of Request whose zero value is not a usable setting
// takes its default from here, and only here (see Request.withDefaults).
const (
	// DefaultMaxHops is the most relays a chain may have. The gains
	// measured held up to four segments, as many as were measured
	// (docs/defaults.md#relays-a-chain-may-have); every relay adds setup
	// time, so a fifth segment is as far as the default goes.
	DefaultMaxHops = 4
	// DefaultMinGain is the speed-up over direct (a fraction: 0.10 = 10 %)
	// a chain must predict before it is preferred: below it the model's
	// error and the chain's extra setup time eat the gain.
	DefaultMinGain = 0.10
	// DefaultMaxAgeSec is how old a measurement may be, seconds: 5 min is
	// five full probe windows (pkg/probe: 30 samples every 2 s).
	DefaultMaxAgeSec = 300
	// DefaultWindowBytes is the window assumed for a node whose window is
	// unknown, bytes: Linux's default autotuning ceiling, tcp_rmem max
	// 6 MiB × ½ (see adminapi.Limits.WindowBytesApprox).
	DefaultWindowBytes = 3 << 20
	// DefaultRelayOverhead is the fraction of throughput each relay costs,
	// calibrated on the split experiment (bench/results/split.md: equal
	// segments, window-limited, against the ideal n× direct;
	// docs/defaults.md#relay-overhead). Part of the measured shortfall is
	// tunnel setup inside the timed download (split.md's notes), so it is
	// a per-relay cost, not pure throughput.
	DefaultRelayOverhead = 0.02
	// DefaultErrorMargin is the fraction within which chains' predictions
	// are ties, won by the chain with fewer relays: one relay's overhead
	// (DefaultRelayOverhead), so a chain with one relay more must predict
	// 2 % more after that relay's own 2 %. It was 5 %, the model's error
	// in the lab, but a tie band buys fewer relays with throughput, not
	// accuracy: the model's error is as likely to favour either chain, so
	// the higher prediction is the better bet, and the relay overhead
	// already charges each relay its cost. In the fleet simulator the
	// wider band planned worse (docs/defaults.md#tie-margin).
	DefaultErrorMargin = 0.02
	// DefaultMSSBytes is the TCP maximum segment size for the Mathis loss
	// bound and the initial window, bytes: 1500-byte MTU minus IPv4, TCP
	// and timestamp headers.
	DefaultMSSBytes = 1448
	// DefaultInitialWindowSegments is the congestion window a TCP sender
	// starts with, in segments of MSSBytes: IW10 (RFC 6928, Linux's
	// default since 2.6.39). Slow start doubles it every round trip.
	DefaultInitialWindowSegments = 10
	// DirectSetupRTTs is the round trips of the direct path before the
	// first byte arrives: the TCP handshake with the destination, then the
	// request out and the first byte back.
	DirectSetupRTTs = 2

	// DefaultMaxStripes is the most TCP connections a striped segment
	// may carry one tunnel over (Constraints.MaxStripes), and its
	// default: the data plane stripes over 1 to 8.
	DefaultMaxStripes = 8

	// MaxNodes bounds a matrix. The search keeps dense n×n tables of
	// segment rates, RTTs and pair indices, 20 bytes per cell: 500 MB at
	// 5,000 relays, 2 GB at 10,000.
	MaxNodes = 10000
	// MaxAlternatives is how many runner-up plans a Result lists.
	MaxAlternatives = 5

	// mathisC is the constant of the Mathis et al. (1997) bound
	// rate = MSS/(RTT·√p) · C for periodic loss with delayed ACKs off.
	mathisC = 1.22
)

// Direction says which way the data of the transfer flows.
type Direction string

// Directions. The zero value "" means Down.
const (
	Down Direction = "down" // destination → client, a download: each segment's client-side end receives
	Up   Direction = "up"   // client → destination, an upload: each segment's destination-side end receives
	Both Direction = "both" // must be good both ways: every rate is min(down, up)
)

// Node is one endpoint of the matrix: the client, a relay or a destination.
//
// Its fields' JSON names are a node's keys in a matrix file (but Name, the
// node's key in "nodes"): a new model input is a field here with its tag
// (omitempty: absent from a file is the zero value, unknown), its bounds in
// checkNode, and ParseMatrix and MarshalJSON take it as they find it.
type Node struct {
	Name   string `json:"name"`
	Relay  bool   `json:"relay,omitempty"`  // may be used as a hop
	Region string `json:"region,omitempty"` // what a destination like "tokyo" resolves by; "" = none
	// WindowBytes is the TCP window this node achieves as a receiver,
	// bytes; 0 = unknown (Model.DefaultWindowBytes is used).
	WindowBytes int64 `json:"window_bytes,omitempty"`
	// SendWindowBytes is the most data this node keeps in flight as a
	// sender, bytes: its send buffer's share (tcp_wmem's max on Linux)
	// that holds unacknowledged data. 0 = unknown, not a limit: the
	// receiver's window alone counts.
	SendWindowBytes int64 `json:"send_window_bytes,omitempty"`
	// LimitBps caps any segment this node is an end of (its access link
	// or a rate limit), bits per second; 0 = unknown (no cap).
	LimitBps float64 `json:"limit_bps,omitempty"`
	// CongestionControl is the TCP congestion control this node sends
	// with (Linux's name: cubic, reno, bbr); "" = unknown, taken as
	// loss-based. It decides whether a segment's loss bounds what this
	// node sends on it: the Mathis bound is for loss-based senders (Reno,
	// CUBIC); a BBR sender paces at its measured bandwidth and is not
	// bound by random loss below LossTolerantBelow.
	CongestionControl string `json:"congestion_control,omitempty"`
	// MaxStripes is the most TCP connections this relay takes one
	// tunnel's segment to another relay over (a striped segment); 0 or 1
	// = it cannot stripe.
	MaxStripes int `json:"max_stripes,omitempty"`
}

// checkNode checks n as Validate does. It is beside Node so that a model
// input's field and the values it may hold are declared in one file.
func checkNode(n Node) error {
	if err := checkName(n.Name); err != nil {
		return err
	}
	if !utf8.ValidString(n.Region) || strings.ContainsFunc(n.Region, unicode.IsControl) {
		return fmt.Errorf("region %q: want printable text", n.Region)
	}
	if n.WindowBytes < 0 {
		return fmt.Errorf("window_bytes %d: want bytes >= 0 (0 = unknown)", n.WindowBytes)
	}
	if n.SendWindowBytes < 0 {
		return fmt.Errorf("send_window_bytes %d: want bytes >= 0 (0 = unknown)", n.SendWindowBytes)
	}
	if !(n.LimitBps >= 0) || math.IsInf(n.LimitBps, 0) {
		return fmt.Errorf("limit_bps %v: want bits/s >= 0 (0 = unknown)", n.LimitBps)
	}
	if n.MaxStripes < 0 {
		return fmt.Errorf("max_stripes %d: want connections >= 0 (0 or 1 = cannot stripe)", n.MaxStripes)
	}
	// Linux's names: TCP_CA_NAME_MAX is 16 with the terminating NUL.
	if len(n.CongestionControl) > 15 || strings.ContainsFunc(n.CongestionControl, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
	}) {
		return fmt.Errorf("congestion_control %q: want a congestion control name (cubic, bbr)", n.CongestionControl)
	}
	return nil
}

// LossTolerantBelow is the random loss rate below which a BBR sender's
// rate is taken as not bound by loss: BBR v1 ignores loss as a signal and
// holds its rate up to roughly 15-20 % random loss (Cardwell et al.,
// "BBR: Congestion-Based Congestion Control", ACM Queue 2016: throughput
// against loss rate). Above it the Mathis bound applies to it too.
const LossTolerantBelow = 0.15

// LossTolerant says whether a sender with congestion control cc is not
// bound by random loss below LossTolerantBelow (every BBR version).
func LossTolerant(cc string) bool { return strings.HasPrefix(cc, "bbr") }

// Pair is one measured (or estimated) round trip between two nodes. Pairs
// are symmetric: one Pair serves both a→b and b→a.
type Pair struct {
	A     string  `json:"a"`
	B     string  `json:"b"`
	RTTMs float64 `json:"rtt_ms"`         // round-trip time, milliseconds; 0.001 to 3,600,000
	Loss  float64 `json:"loss,omitempty"` // packet loss, fraction 0..1; 1 = unreachable
	// Estimated marks an RTT that was not probed (e.g. a Consul network
	// coordinate prior). It is used, and every segment using it says so.
	Estimated bool `json:"estimated,omitempty"`
	// AgeSec is how old the measurement is, seconds, as of when the caller
	// built the matrix (the planner never reads a clock); 0 = fresh.
	AgeSec float64 `json:"age_s,omitempty"`
	// AWindowBytes and BWindowBytes are the receive windows A and B were
	// measured to advertise on this path, bytes; 0 = the node's
	// WindowBytes. How much of its buffer a host's kernel turns into
	// window depends on the path (what its packets cost in memory), so a
	// window measured on a segment beats the node's estimate there.
	AWindowBytes int64 `json:"a_window_bytes,omitempty"`
	BWindowBytes int64 `json:"b_window_bytes,omitempty"`
	// ASendBps is the rate A's traffic to B was learnt to reach while the
	// path, not a window, a buffer or the application, held it back
	// (a relay learns it from the tunnels it carries), bits/s; BSendBps
	// the same from B to A. 0 = unknown. A segment's rate never exceeds
	// its sender's: it is what the path gave, whatever the windows allow.
	ASendBps float64 `json:"a_send_bps,omitempty"`
	BSendBps float64 `json:"b_send_bps,omitempty"`
	// ASendAgeSec and BSendAgeSec are how old ASendBps and BSendBps are,
	// seconds (since the newest tunnel that taught them ended).
	ASendAgeSec float64 `json:"a_send_age_s,omitempty"`
	BSendAgeSec float64 `json:"b_send_age_s,omitempty"`
	// ASendSource and BSendSource say who learnt ASendBps and BSendBps:
	// "" or LearntFromTunnels, the sender from the tunnels it carried;
	// LearntFromBench, relayctl bench, from a download it timed;
	// LearntFromProbe, the sender's capacity probe (trains of datagrams:
	// the bottleneck's capacity, not what other traffic leaves of it);
	// LearntByReceiver, the receiver (a relay) from what its tunnels
	// received while nothing after it held them back (a destination's
	// sends, which no relay sends on).
	ASendSource string `json:"a_send_source,omitempty"`
	BSendSource string `json:"b_send_source,omitempty"`
	// ALossSource says who measured the loss of A's sends to B, which
	// Loss (the higher of the two ways) covers; BLossSource the same of
	// B's sends: "" the probes alone (TCP handshakes: a loss they see is
	// real, but random loss below a few per cent barely shows in them, so
	// a 0 from them is unknown, not clean); LearntFromTunnels, the
	// retransmissions of the traffic A's (B's) tunnels sent; LearntFromBench,
	// a timed transfer; LossDeclared, whoever wrote the matrix.
	ALossSource string `json:"a_loss_source,omitempty"`
	BLossSource string `json:"b_loss_source,omitempty"`
}

// Sources of a learnt rate (Pair.ASendSource, Segment.LearntSource) or a
// loss (Pair.ALossSource, BLossSource).
const (
	LearntFromTunnels = "tunnels"
	LearntFromBench   = "bench"
	// LearntFromProbe: a relay's capacity probe measured its sends
	// (Pair.ASendSource, BSendSource, Segment.LearntSource only).
	LearntFromProbe = "probe"
	// LearntByReceiver: a relay learnt from what its tunnels received
	// (Pair.ASendSource, BSendSource, Segment.LearntSource only).
	LearntByReceiver = "received"
	// LossDeclared: a loss the matrix's author states (Pair.ALossSource,
	// BLossSource only).
	LossDeclared = "declared"
)

// What a segment's rate can rest on that nobody measured, learnt or
// declared (Segment.Unknown). Each can hold the segment below its
// predicted rate, so a plan with one predicts an upper bound (Plan.Bound).
const (
	// UnknownCapacity: no bandwidth limit declared at either end and no
	// rate learnt for the segment's sender: only windows and loss bound it.
	UnknownCapacity = "capacity"
	// UnknownWindow: the receiver's window is Model.DefaultWindowBytes,
	// Linux's default autotuning ceiling (a real window is rarely larger).
	UnknownWindow = "window"
	// UnknownLoss: the loss is 0 from the probes alone, the sender is
	// loss-based (a BBR sender is not bound by the loss probes miss), and
	// the fleet has measured too little loss for a prior (LossPrior).
	UnknownLoss = "loss"
)

// hasExtras says p has more than an RTT that bounds a segment's rate
// per direction: loss, measured windows or learnt send rates.
func (p *Pair) hasExtras() bool {
	return p.Loss > 0 || p.AWindowBytes > 0 || p.BWindowBytes > 0 || p.ASendBps > 0 || p.BSendBps > 0
}

// Matrix is what the planner knows: the nodes and the RTTs between them.
// Pairs that are missing are unknown paths, never used. The file format
// (ParseMatrix, MarshalJSON) is described in the package documentation.
type Matrix struct {
	Nodes []Node
	Pairs []Pair
}

// Request says what to plan: from which client to which destination, in
// which direction, under which constraints and model. The zero value of
// every field but Client and Destination means its default.
type Request struct {
	Client      string      `json:"client"`              // node name
	Destination string      `json:"destination"`         // node name (see Matrix.Resolve for regions)
	Direction   Direction   `json:"direction,omitempty"` // "" = Down
	Constraints Constraints `json:"constraints"`
	Model       Model       `json:"model"`
	// SizeBytes is the transfer's size, bytes. 0 = unknown or large: plans
	// are ranked by their steady rate. Above 0 they are ranked by their
	// predicted completion time for this many bytes, which counts the
	// setup round trips and slow start (see the package documentation).
	SizeBytes int64 `json:"size_bytes,omitempty"`
	// Measured are timed transfers over some of the paths (relayctl
	// bench's history): a plan over a measured path predicts the lower of
	// the model's rate and the measured one, and a measured chain that
	// beats direct is not displaced by an untried one whose prediction is
	// a bound. Not used with SizeBytes.
	Measured []Measurement `json:"measured,omitempty"`
}

// Constraints limit which chains the search considers and when one wins.
type Constraints struct {
	// MaxHops is the most relays in a chain; 0 = DefaultMaxHops, negative
	// = none (direct only).
	MaxHops int `json:"max_hops,omitempty"`
	// Include is an allow-list: when not empty only these relays may be
	// hops. Names must be relays of the matrix.
	Include []string `json:"include,omitempty"`
	// Exclude lists relays never to use. Names must be relays of the matrix.
	Exclude []string `json:"exclude,omitempty"`
	// MinGain is the speed-up over direct a chain needs to be preferred, a
	// fraction (0.10 = 10 % faster); 0 = DefaultMinGain, negative = none
	// (any chain ranked above direct wins).
	MinGain float64 `json:"min_gain,omitempty"`
	// MaxAgeSec is how old a pair may be, seconds; older pairs are stale.
	// 0 = DefaultMaxAgeSec, negative = no limit.
	MaxAgeSec float64 `json:"max_age_s,omitempty"`
	// UseStale makes stale pairs usable; every segment using one is marked
	// Stale. By default stale pairs are ignored like missing ones, and the
	// Result's notes count them.
	UseStale bool `json:"use_stale,omitempty"`
	// MaxStripes is the most TCP connections a segment between two
	// relays may be striped over (see Segment.Stripes), at most
	// DefaultMaxStripes; 0 = DefaultMaxStripes, 1 or negative = none (one
	// connection per segment).
	MaxStripes int `json:"max_stripes,omitempty"`
}

// Model holds the parameters of the throughput model.
type Model struct {
	// DefaultWindowBytes is the window of a node whose window is unknown,
	// bytes; 0 = DefaultWindowBytes. When no window is known all windows
	// are equal, and equal-RTT splits are best.
	DefaultWindowBytes int64 `json:"default_window_bytes,omitempty"`
	// RelayOverhead is the fraction of throughput each relay costs; a
	// chain of n relays predicts min(segment rates) × (1−RelayOverhead)^n.
	// 0 = DefaultRelayOverhead, negative = none; must be below 1.
	RelayOverhead float64 `json:"relay_overhead,omitempty"`
	// MSSBytes is the TCP segment size of the Mathis loss bound, bytes;
	// 0 = DefaultMSSBytes.
	MSSBytes int `json:"mss_bytes,omitempty"`
	// ErrorMargin is the fraction within which two chains' predictions
	// are ties: the best plan is the chain with the fewest relays among
	// those predicting at least (1−ErrorMargin) × the highest prediction.
	// 0 = DefaultErrorMargin, negative = none (the highest prediction
	// wins); must be below 1.
	ErrorMargin float64 `json:"error_margin,omitempty"`
	// Setup is how a chain is set up, for the setup round trips of a
	// completion time (only with Request.SizeBytes): SetupWarm (the
	// default, ""), SetupOptimistic or SetupCold.
	Setup SetupKind `json:"setup,omitempty"`
	// InitialWindowSegments is a TCP sender's initial congestion window,
	// in segments of MSSBytes, for slow start (only with
	// Request.SizeBytes); 0 = DefaultInitialWindowSegments.
	InitialWindowSegments int `json:"initial_window_segments,omitempty"`
	// LinkFramingBytes is what a relay link's framing takes of each TCP
	// segment while a transfer ramps up, bytes: a TLS record's overhead
	// (22, linktls.RecordOverheadBytes) over TLS links, which send one
	// record per segment while they ramp; 0 over plain links. A chain's
	// slow start then carries MSSBytes − LinkFramingBytes per segment of
	// its window (only with Request.SizeBytes); direct carries MSSBytes.
	// Below MSSBytes.
	LinkFramingBytes int `json:"link_framing_bytes,omitempty"`
}

// SetupKind says how a chain is set up before its first byte arrives, in
// round trips. S is the sum of the chain's segment RTTs, L the last
// segment's (last relay → destination). Direct is always
// DirectSetupRTTs × its RTT.
type SetupKind string

// Setup kinds.
const (
	// SetupWarm: relays keep pooled, already TLS-handshaken connections to
	// each other and the client's entry is local (relayctl connect). The
	// route header travels to the last relay (one way over all segments
	// but the last), the last relay's TCP handshake with the destination
	// takes L, the status comes back, then the request and the first byte
	// cross the whole path: 2·S.
	SetupWarm SetupKind = "warm"
	// SetupOptimistic: as warm, but the request rides with the route
	// header (optimistic data), so it waits only for the last handshake:
	// S + L.
	SetupOptimistic SetupKind = "optimistic"
	// SetupCold: as warm, plus each connection before the last segment is
	// opened for this tunnel: a TCP handshake and a TLS 1.3 handshake, one
	// round trip each, on every segment but the last: 2·S + 2·(S − L).
	SetupCold SetupKind = "cold"
)

// withDefaults returns req with every zero or negative-means-none field
// replaced by the value the search uses, or an error naming a field that
// holds an impossible value.
func (req Request) withDefaults() (Request, error) {
	c, m := &req.Constraints, &req.Model
	switch req.Direction {
	case "":
		req.Direction = Down
	case Down, Up, Both:
	default:
		return req, fmt.Errorf("direction %q: want down, up or both", req.Direction)
	}
	switch {
	case c.MaxHops == 0:
		c.MaxHops = DefaultMaxHops
	case c.MaxHops < 0:
		c.MaxHops = 0
	}
	switch {
	case math.IsNaN(c.MinGain) || math.IsInf(c.MinGain, 0):
		return req, fmt.Errorf("constraints.min_gain %v: want a finite fraction", c.MinGain)
	case c.MinGain == 0:
		c.MinGain = DefaultMinGain
	case c.MinGain < 0:
		c.MinGain = 0
	}
	switch {
	case math.IsNaN(c.MaxAgeSec):
		return req, fmt.Errorf("constraints.max_age_s %v: want seconds", c.MaxAgeSec)
	case c.MaxAgeSec == 0:
		c.MaxAgeSec = DefaultMaxAgeSec
	case c.MaxAgeSec < 0:
		c.MaxAgeSec = math.Inf(1)
	}
	switch {
	case c.MaxStripes == 0:
		c.MaxStripes = DefaultMaxStripes
	case c.MaxStripes < 0:
		c.MaxStripes = 1
	case c.MaxStripes > DefaultMaxStripes:
		return req, fmt.Errorf("constraints.max_stripes %d: want 1 to %d connections (0 = %d, negative = 1)", c.MaxStripes, DefaultMaxStripes, DefaultMaxStripes)
	}
	switch {
	case m.DefaultWindowBytes == 0:
		m.DefaultWindowBytes = DefaultWindowBytes
	case m.DefaultWindowBytes < 0:
		return req, fmt.Errorf("model.default_window_bytes %d: want bytes > 0 (0 = default)", m.DefaultWindowBytes)
	}
	if err := fractionBelowOne("model.relay_overhead", &m.RelayOverhead, DefaultRelayOverhead); err != nil {
		return req, err
	}
	if err := fractionBelowOne("model.error_margin", &m.ErrorMargin, DefaultErrorMargin); err != nil {
		return req, err
	}
	switch {
	case m.MSSBytes == 0:
		m.MSSBytes = DefaultMSSBytes
	case m.MSSBytes < 0:
		return req, fmt.Errorf("model.mss_bytes %d: want bytes > 0 (0 = default)", m.MSSBytes)
	}
	switch m.Setup {
	case "":
		m.Setup = SetupWarm
	case SetupWarm, SetupOptimistic, SetupCold:
	default:
		return req, fmt.Errorf("model.setup %q: want warm, optimistic or cold", m.Setup)
	}
	switch {
	case m.InitialWindowSegments == 0:
		m.InitialWindowSegments = DefaultInitialWindowSegments
	case m.InitialWindowSegments < 0:
		return req, fmt.Errorf("model.initial_window_segments %d: want segments > 0 (0 = default)", m.InitialWindowSegments)
	}
	if m.LinkFramingBytes < 0 || m.LinkFramingBytes >= m.MSSBytes {
		return req, fmt.Errorf("model.link_framing_bytes %d: want bytes from 0 to below the MSS (%d)", m.LinkFramingBytes, m.MSSBytes)
	}
	if err := checkMeasured(req.Measured); err != nil {
		return req, err
	}
	if req.SizeBytes < 0 {
		return req, fmt.Errorf("size_bytes %d: want bytes >= 0 (0 = unknown: rank by steady rate)", req.SizeBytes)
	}
	return req, nil
}

// fractionBelowOne applies the defaults of a fraction field named name: 0
// is dflt, negative is none (0); NaN and 1 or more are errors.
func fractionBelowOne(name string, v *float64, dflt float64) error {
	switch {
	case math.IsNaN(*v) || *v >= 1:
		return fmt.Errorf("%s %v: want a fraction below 1", name, *v)
	case *v == 0:
		*v = dflt
	case *v < 0:
		*v = 0
	}
	return nil
}

// Segment is one TCP connection of a plan: From is its client-side end.
type Segment struct {
	From  string  `json:"from"`
	To    string  `json:"to"`
	RTTMs float64 `json:"rtt_ms"`
	// Receiver is the end whose receive window counts in the plan's
	// direction: From for down, To for up, for both the slower way's.
	Receiver    string `json:"receiver"`
	WindowBytes int64  `json:"window_bytes"` // Receiver's window, bytes
	// WindowAssumed says WindowBytes is Model.DefaultWindowBytes: the
	// receiver's window is unknown.
	WindowAssumed bool `json:"window_assumed"`
	// Sender is the other end: the one whose send window counts.
	Sender string `json:"sender"`
	// SendWindowBytes is Sender's send window, bytes; 0 = unknown (no
	// limit).
	SendWindowBytes int64 `json:"send_window_bytes"`
	// SenderCongestionControl is Sender's congestion control ("" =
	// unknown, taken as loss-based): a loss-tolerant sender (BBR) is not
	// bound by Loss.
	SenderCongestionControl string  `json:"sender_congestion_control,omitempty"`
	LimitBps                float64 `json:"limit_bps"` // the lower known LimitBps of the two ends, bits/s; 0 = none known
	// Loss is the loss of Sender's sends the prediction used, a fraction
	// 0..1: measured, or a prior (LossSource).
	Loss float64 `json:"loss"`
	// LearntBps is the rate Sender's traffic to Receiver was learnt to
	// reach (Pair.ASendBps, BSendBps), bits/s; 0 = unknown.
	LearntBps float64 `json:"learnt_bps,omitempty"`
	// LearntAgeSec is how old LearntBps is, seconds.
	LearntAgeSec float64 `json:"learnt_age_s,omitempty"`
	// LearntSource is who learnt LearntBps (LearntFromTunnels,
	// LearntFromBench or LearntFromProbe).
	LearntSource string `json:"learnt_source,omitempty"`
	// RateBps is the segment's ceiling in the plan's direction, bits/s:
	// min(min(window, send window)·8/RTT, LimitBps, Mathis bound under
	// Loss when the sender's congestion control is loss-based, LearntBps),
	// the window and Mathis bounds × Stripes on a striped segment.
	RateBps   float64 `json:"rate_bps"`
	DownBps   float64 `json:"down_bps"`   // the ceiling for a download, bits/s
	UpBps     float64 `json:"up_bps"`     // the ceiling for an upload, bits/s
	LimitedBy string  `json:"limited_by"` // which term sets RateBps: "window", "send_window", "limit", "loss" or "learnt"
	Estimated bool    `json:"estimated"`  // the RTT is an estimate, not a measurement
	Stale     bool    `json:"stale"`      // the RTT is older than Constraints.MaxAgeSec (only with UseStale)
	AgeSec    float64 `json:"age_s"`      // how old the RTT is, seconds
	// Stripes is how many TCP connections the segment carries the tunnel
	// over, when more than one (a striped segment between two relays:
	// planner/stripes.go); 0 = one.
	Stripes int `json:"stripes,omitempty"`
	// OneLinkBps is what one connection would carry in the plan's
	// direction, bits/s, and OneLinkLimitedBy which term holds it there
	// ("window", "send_window" or "loss"): the segment's RateBps and
	// LimitedBy without striping. Set only when Stripes is.
	OneLinkBps       float64 `json:"one_link_bps,omitempty"`
	OneLinkLimitedBy string  `json:"one_link_limited_by,omitempty"`
	// LossSource is who measured the loss of Sender's sends on this
	// segment (Pair.ALossSource or BLossSource): "" the probes alone;
	// LossFromPrior when nobody did and Loss is the fleet's prior
	// (Result.LossPrior), a guess.
	LossSource string `json:"loss_source,omitempty"`
	// Unknown lists what RateBps rests on that nobody measured, learnt or
	// declared (UnknownCapacity, UnknownWindow, UnknownLoss), in that
	// order; empty when every input is known.
	Unknown []string `json:"unknown,omitempty"`
}

// Plan is one way from the client to the destination: direct (no relays)
// or a chain of relays.
type Plan struct {
	Chain    []string  `json:"chain"` // relay names in order from the client; empty for direct
	Segments []Segment `json:"segments"`
	// Bottleneck is the index in Segments of the slowest segment; -1 when
	// there are no segments (the direct path was not measured).
	Bottleneck int `json:"bottleneck"`
	// PredictedBps is the predicted throughput in the requested direction,
	// bits/s: min over segments × (1−RelayOverhead)^len(Chain). For Both
	// it is min(PredictedDownBps, PredictedUpBps).
	PredictedBps float64 `json:"predicted_bps"`
	// Bound says PredictedBps, in the requested direction (both ways for
	// Both), is an upper bound, not a point: a segment rests on an unknown
	// (Segment.Unknown) that can hold it lower. The other direction's
	// figure is not judged. relayctl bench, or traffic the relays carry,
	// turns unknowns into measurements.
	Bound            bool    `json:"bound,omitempty"`
	PredictedDownBps float64 `json:"predicted_down_bps"`
	PredictedUpBps   float64 `json:"predicted_up_bps"`
	// DirectPredictedBps is the direct plan's PredictedBps, bits/s; 0 when
	// the direct path was not measured.
	DirectPredictedBps float64 `json:"direct_predicted_bps"`
	// Speedup is PredictedBps / DirectPredictedBps; 0 when the direct
	// prediction is unknown or zero.
	Speedup    float64 `json:"speedup"`
	TotalRTTMs float64 `json:"total_rtt_ms"` // sum of segment RTTs, milliseconds
	// Measured are the timed transfers over this plan's path that its
	// predictions took into account (Request.Measured); none when its
	// path was not measured.
	Measured []Measurement `json:"measured,omitempty"`
	// Transfer is the predicted completion of a transfer of
	// Request.SizeBytes over this plan; nil without a size, or when the
	// plan moves nothing (no segments, or a rate of 0).
	Transfer *Transfer `json:"transfer,omitempty"`
	Reasons  []string  `json:"reasons"` // why this plan is what it is, and why it won or lost
}

// Transfer is a plan's predicted completion time for Request.SizeBytes:
// CompletionMs = SetupMs + RampMs + SteadyMs.
type Transfer struct {
	SizeBytes    int64   `json:"size_bytes"`
	CompletionMs float64 `json:"completion_ms"` // from the first packet sent to the last byte received, milliseconds
	// SetupMs is the time until the first byte arrives, milliseconds: the
	// setup round trips of Model.Setup (direct: DirectSetupRTTs × RTT).
	// The first round of slow start (the initial window) arrives with it.
	SetupMs float64 `json:"setup_ms"`
	// RampMs is the slow-start rounds after the first, milliseconds: each
	// one RampRTTMs, the window doubling, until the size is delivered or
	// the window carries the steady rate.
	RampMs float64 `json:"ramp_ms"`
	// SteadyMs is the rest of the bytes at Plan.PredictedBps, in whole
	// flights where a window holds it (Flights), milliseconds.
	SteadyMs float64 `json:"steady_ms"`
	// LossMs is what the segments' loss adds, expected, milliseconds: a
	// round trip of a lossy segment for each round of the ramp that loses
	// a packet there, and one more for a loss in the last flight (0 on
	// paths without loss).
	LossMs float64 `json:"loss_ms,omitempty"`
	// RampRTTMs is the RTT the ramp is counted in: the longest segment's,
	// the slowest to ramp up, milliseconds.
	RampRTTMs float64 `json:"ramp_rtt_ms"`
	// Rounds is how many rounds of slow start the transfer uses, counting
	// the first (the initial window).
	Rounds int `json:"rounds"`
	// Flights is how many round trips of the bottleneck segment SteadyMs
	// is when a window holds the steady rate: a window's worth arrives
	// per round trip, and the transfer ends with the flight that carries
	// its last byte. 0 when a capacity or loss holds it (SteadyMs is the
	// bytes at the rate) or the ramp delivered everything.
	Flights int `json:"flights,omitempty"`
	// EffectiveBps is SizeBytes × 8 / CompletionMs, bits/s: what a
	// download timer would report.
	EffectiveBps float64 `json:"effective_bps"`
	// Speedup is the direct plan's CompletionMs over this one's; 0 when
	// direct's is unknown.
	Speedup float64 `json:"speedup"`
}

// Crossover says from which transfer size the chain with the best steady
// rate finishes sooner than direct.
type Crossover struct {
	Chain []string `json:"chain"` // the chain a size-less plan would pick by steady rate
	// Kind is CrossoverAbove (the chain finishes sooner for every size
	// above Bytes, and not at Bytes), CrossoverAlways (at every size:
	// Bytes is 0) or CrossoverNever (direct finishes as soon or sooner for
	// large sizes: Bytes is -1).
	Kind  string `json:"kind"`
	Bytes int64  `json:"bytes"`
}

// Crossover kinds.
const (
	CrossoverAbove  = "above"
	CrossoverAlways = "always"
	CrossoverNever  = "never"
)

// Result is the answer to a Request.
type Result struct {
	Client      string    `json:"client"`
	Destination string    `json:"destination"`
	Direction   Direction `json:"direction"`
	// Best is the plan to use: Direct unless a chain beats it by
	// Constraints.MinGain.
	Best   Plan `json:"best"`
	Direct Plan `json:"direct"`
	// Alternatives are up to MaxAlternatives other chains, best first, each
	// with the reason it lost. Direct is never among them.
	Alternatives []Plan `json:"alternatives"`
	// Notes say what the search left out or assumed for the whole matrix
	// (stale pairs ignored, windows assumed).
	Notes []string `json:"notes"`
	// SizeBytes is Request.SizeBytes: plans are ranked by completion time
	// for it; 0 = by steady rate.
	SizeBytes int64 `json:"size_bytes,omitempty"`
	// KeptOver is the untried chain a tried plan was kept ahead of: it
	// ranked first, but on an unknown or a loss prior nobody had measured,
	// where the tried plan's figure came from traffic (Request.Measured, or
	// a rate or loss learnt from traffic that holds its bottleneck);
	// measuring it settles which is faster. Empty when none was.
	KeptOver []string `json:"kept_over,omitempty"`
	// Exploring says Best is an untried chain (its prediction rests on an
	// unknown or a loss prior) picked ahead of a tried one, whose traffic
	// taught its bottleneck, that does not beat direct by MinGain: the plan
	// moves onto a guess, and its reasons say so.
	Exploring bool `json:"exploring,omitempty"`
	// Awaiting names the measurements whose absence leaves every chain
	// out, when relays are usable but no chain connects (a fleet that has
	// not measured itself yet: no relay's RTT to the destination, none
	// from the client, none between the relays either side reaches). Best
	// is then direct for want of data, not on its merits; a caller may
	// plan again once they arrive. Empty otherwise.
	Awaiting []string `json:"awaiting,omitempty"`
	// LossPrior is the loss a segment nobody measured got (its
	// LossSource LossFromPrior), from what the fleet measured elsewhere;
	// its PerRTTMs is 0 when there was too little for one (a note says so).
	LossPrior LossPrior `json:"loss_prior"`
	// Crossover is from which size the best chain by steady rate finishes
	// sooner than direct; nil without a size, without such a chain or
	// without a measured direct path.
	Crossover *Crossover `json:"crossover,omitempty"`
}

// Limit kinds for Segment.LimitedBy.
const (
	limitedByWindow     = "window"
	limitedBySendWindow = "send_window"
	limitedByLimit      = "limit"
	limitedByLoss       = "loss"
	limitedByLearnt     = "learnt"
)

// capBps is the direction-independent ceiling of a segment, bits/s: the
// lower known bandwidth limit of its ends (limitBps, 0 = none). +Inf when
// none applies; 0 when loss is total (no probe answered: unusable, where
// the Mathis formula would still give a number).
func capBps(limitBps, loss float64) float64 {
	switch {
	case loss >= 1:
		return 0
	case limitBps > 0:
		return limitBps
	}
	return math.Inf(1)
}

// lossBps is the loss bound of data a sender with congestion control cc
// sends over a segment, bits/s: the Mathis bound MSS·8·C/(RTT·√loss) for a
// loss-based sender, none (+Inf) for a loss-tolerant one below
// LossTolerantBelow, none without loss.
func lossBps(rttMs, loss float64, cc string, mssBytes int) float64 {
	if loss <= 0 || loss < LossTolerantBelow && LossTolerant(cc) {
		return math.Inf(1)
	}
	return mathisBps(rttMs, loss, mssBytes)
}

// mathisBps is the Mathis bound of a segment with loss > 0, bits/s.
func mathisBps(rttMs, loss float64, mssBytes int) float64 {
	return float64(mssBytes) * 8 * mathisC / (rttMs / 1000 * math.Sqrt(loss))
}

// windowBps is the window bound of a segment, bits/s: one window per round
// trip, windowBytes·8 bits / (rttMs/1000) s.
func windowBps(windowBytes int64, rttMs float64) float64 {
	return float64(windowBytes) * 8000 / rttMs
}

// flightBytes is what one round trip can carry from a sender with send
// window sendBytes (0 = unknown, no limit) to a receiver with window
// recvBytes, bytes.
func flightBytes(recvBytes, sendBytes int64) int64 {
	if sendBytes > 0 {
		return min(recvBytes, sendBytes)
	}
	return recvBytes
}

// minLimit is the lower of two node limits where 0 means unknown.
func minLimit(a, b float64) float64 {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}
