// Package planner decides where to split a long TCP path through relays.
// It is pure: a Matrix of nodes and RTTs and a Request go in, a ranked
// Result with its reasons comes out. No I/O, no clock (ages are inputs).
//
// # Model
//
// A TCP connection moves at most one window per round trip. A relay
// terminates TCP, so a chain client → r1 → … → destination is a series of
// segments, each its own connection, and the chain moves at the speed of
// its slowest segment. Per segment from → to (from on the client side):
//
//	rate_bps = min(flight_bytes·8 / (rtt_ms/1000),   the window bound
//	               limit_bps of from and of to,       where known
//	               mss_bytes·8·1.22 / ((rtt_ms/1000)·√loss),   Mathis, when loss > 0
//	                                                  and the sender is loss-based
//	               send_bps of the sender towards the receiver)   learnt, where known
//
// send_bps is the rate the sender's own traffic reached on this segment
// while the network held it back (not a window, a buffer or a lack of
// data): what a relay learns from the tunnels it carries, or, where it
// carried none, the capacity its probe measured (a bottleneck's capacity
// bounds the sender's rate too). It bounds the segment however large the
// windows.
//
// Loss 1 (no probe answered) makes a pair unusable: its rate is 0, where
// the Mathis formula would still give a number. The Mathis bound is for
// loss-based congestion control (Reno, CUBIC), the sender's: the
// destination on a download's last segment, each relay on the segment
// towards the client, the client's own on an upload's first. A sender
// whose Node.CongestionControl is BBR is not bound by loss below
// LossTolerantBelow (15 %); an unknown one is taken as loss-based.
//
// flight_bytes is what one round trip carries: the receiving end's window
// (window_bytes), or the sending end's send window (send_window_bytes)
// where that is smaller. The receiver is from for a download (Down: data
// flows destination → client), to for an upload (Up). Unknown windows are
// Model.DefaultWindowBytes; an unknown send window is no limit. With no
// window known all windows are equal and the best split is the one with
// equal segment RTTs. With unequal windows it is not: a client with a 64
// KiB window and relays with large ones is best served by a first relay
// close to the client. The send window matters on long segments: a Linux
// sender at the default tcp_wmem max of 4 MiB keeps about 4 MB in flight,
// 140 Mbit/s over 230 ms, whatever the receiver's window.
//
// What nobody measured, learnt or declared is listed per segment
// (Segment.Unknown): its capacity (no limit_bps at either end, no
// send_bps learnt for its sender), its receiver's window (assumed
// DefaultWindowBytes) and its loss (0 from the probes alone, which miss
// random loss below a few per cent, for a loss-based sender). The rate is
// computed with each unknown at its best (no cap, the assumed window, no
// loss), so a plan with one predicts an upper bound (Plan.Bound), and a
// chain that wins on one says what each unknown segment must carry for
// it to still beat direct.
//
// A loss nobody measured is not taken as 0 where the fleet has measured
// loss elsewhere: such a segment with a loss-based sender gets a prior
// (Result.LossPrior, Segment.LossSource LossFromPrior), the measured
// segments' Σ loss / Σ rtt_ms times its own rtt_ms, at most the highest
// loss measured. A prior needs LossPriorMinSegments measured segments, one
// of them lossy; without, the loss stays unknown. A prior is a guess, not
// a bound either way: it is not in Segment.Unknown, and the reasons name
// it. sendLoss is the one place that decides.
//
// A plan that ranks first only on what nobody measured (an unknown or a
// loss prior: untried) does not displace a tried one, whose bottleneck
// figure came from traffic (Request.Measured, a learnt rate, a loss learnt
// from tunnels or bench) and which beats direct: Result.KeptOver names the
// untried chain. An untried pick ahead of a tried chain that does not beat
// direct says it is exploring (Result.Exploring).
//
// A segment between two relays whose max_stripes are both 2 or more may
// be striped: the tunnel carried over n TCP connections (Segment.Stripes),
// its bytes put back in order at the next relay. Each connection has its
// own window and its own Mathis share, so those two bounds are n times one
// connection's; limit_bps and send_bps are not (send_bps is what tunnels
// reached, however many connections carried them). n is chosen only where
// limit_bps is known, as the least n whose window and Mathis bounds reach
// 90 % of it (or of a send_bps below it), up to the lower max_stripes of
// the two relays and Constraints.MaxStripes (DefaultMaxStripes), and only
// when that gains 10 % over one connection; otherwise n is 1.
// segmentStripes is the one place that decides; every rate the search
// and its plans use is the striped one. The client's segment and the
// destination's are never striped.
//
// A plan with n relays predicts
//
//	predicted_bps = min over segments(rate_bps) × (1 − relay_overhead)^n
//
// Direct is the plan with n = 0. Both asks for a plan good in both
// directions: each rate is min(down, up). The overhead default, 2 % per
// relay, is calibrated on bench/results/split.md.
//
// # Search
//
// Search finds the exact best chain of at most Constraints.MaxHops distinct
// relays, ranked by predicted_bps, then lower total RTT, then fewer relays,
// then the lexicographically smaller chain. Chains predicting within
// Model.ErrorMargin (2 %, one relay's overhead) of the first are ties, and
// the tie goes to the one with the fewest relays: a relay that adds less
// than its own overhead again is not chosen. For each relay count k it runs
// a bottleneck dynamic program over hop count (Bellman-Ford with max/min:
// best[k][v] = max over u of min(best[k−1][u], rate(u,v))), skipping rows
// that cannot beat a chain already found, then a shortest-RTT program
// restricted to segments at least that fast to pick the lowest-RTT chain
// among the fastest. Cost: O(MaxHops · n²) time at worst, and dense n×n
// tables of rates, RTTs and pair indices (20 bytes per cell) for n relays:
// 500 MB at 5,000 relays. bench/results/planner.md has timings.
//
// Direct wins unless the best chain predicts at least Constraints.MinGain
// (default 10 %) more. Alternatives, each with the reason it lost, are the
// best chain for each relay count (where no shorter chain beats it) and
// the best chain avoiding each relay of the top chain: the fallback if
// that relay fails.
//
// Missing pairs are unknown paths, never used. When relays are usable
// but no chain connects for want of pairs (no relay's RTT to the
// destination, none from the client, none between the relays either side
// reaches), Result.Awaiting names what is missing: direct then wins for
// want of data, not on its merits. Pairs older than
// Constraints.MaxAgeSec are stale: ignored like missing ones, and counted
// in the Result's notes, unless Constraints.UseStale is set; then they are
// used and every segment built on one is marked stale. Estimated pairs
// (not probed) are used and every segment built on one is marked
// estimated.
//
// # Transfer size
//
// The steady rate is the whole story only for large transfers. With
// Request.SizeBytes > 0 plans are ranked by predicted completion time
// for that many bytes (ms):
//
//	completion_ms = setup_ms + ramp_ms + steady_ms (+ loss_ms)
//
// setup_ms is the time to the first byte. Direct: DirectSetupRTTs (2) ×
// its RTT, the TCP handshake then the request. A chain with segment RTTs
// summing to S and a last segment of L, by Model.Setup: warm (default;
// pooled relay connections) 2·S, optimistic (the request rides with the
// route header) S + L, cold (TCP and TLS 1.3 handshakes on every segment
// but the last) 2·S + 2·(S − L).
//
// ramp_ms is slow start. Every segment's sender starts at an initial
// window iw = Model.InitialWindowSegments (IW10) × MSSBytes and doubles
// it each of its round trips; the chain ramps like its slowest segment,
// the longest (RTT r), up to the chain's steady rate P = PredictedBps,
// one round of which is cap = P·r/8000 bytes. Round j carries
// min(iw·2^j, cap) bytes; the ramp is the rounds whose window is below
// cap, and at least the first. The first round arrives with the first
// byte, so a size the ramp delivers in m rounds takes (m − 1)·r.
//
// steady_ms is the rest, after the ramp's bytes, at P.
//
// A path with loss adds loss_ms, expected: a lost packet holds the bytes
// behind it at its segment's receiver for about that segment's round trip
// while it is sent again (whatever the congestion control; a loss-based
// sender's lower rate is in P). Each round of the ramp that loses a
// packet there costs that once, and a loss in the transfer's last flight
// once more (no later packet reveals it); in the steady state the sender
// keeps its rate and the pipeline catches up. With p the segment's loss
// and n a round's packets, a round loses a packet with probability
// 1 − (1 − p)^n.
//
// Ties are completion times within Model.ErrorMargin of the soonest, won
// by the fewest relays; a chain beats direct only when direct's time is at
// least (1 + MinGain) × its own. The search is exact (see sized.go: a
// depth-first enumeration with bounds, seeded by the steady-rate search).
// Result.Crossover is the size above which the chain with the best steady
// rate finishes sooner than direct. Not modelled: loss beyond the
// above, congestion control other than slow start (no CUBIC or BBR growth, no
// competing flows), pacing, delayed ACKs, TLS record and header bytes,
// and the server's own time to first byte.
//
// # Matrix file
//
// ParseMatrix reads the offline matrix format, written by hand or by
// Matrix.MarshalJSON:
//
//	{
//	  "nodes": {
//	    "client": {"window_bytes": 65536},
//	    "r1":     {"relay": true, "window_bytes": 4194304, "send_window_bytes": 4063232, "limit_bps": 1e9, "congestion_control": "bbr", "max_stripes": 8},
//	    "srv":    {"region": "tokyo"}
//	  },
//	  "rtt_ms": [
//	    {"a": "client", "b": "r1", "rtt_ms": 12.5, "a_window_bytes": 118784},
//	    ["client", "srv", 50.0],
//	    {"a": "r1", "b": "srv", "rtt_ms": 30.1, "loss": 0.001, "estimated": true, "age_s": 40}
//	  ]
//	}
//
// nodes maps each node name (1–64 bytes, no spaces or control characters)
// to its properties, Node's fields by their JSON names (Node says more of
// each), all optional: relay (bool: may be a hop), region
// (what a destination like "tokyo" resolves by, see Matrix.Resolve),
// window_bytes (receive window, bytes; absent or 0 = unknown),
// send_window_bytes (most bytes in flight as a sender; absent or 0 =
// unknown, no limit), limit_bps (bandwidth cap, bits/s; absent or 0 =
// unknown), congestion_control (the node's as a sender: cubic, bbr, ...;
// absent = unknown, loss-based), max_stripes (the most TCP connections
// the relay takes a striped segment to another relay over; absent, 0 or 1
// = it cannot stripe).
//
// rtt_ms lists symmetric pairs, each either an [a, b, rtt_ms] triple or
// an object with a, b, rtt_ms (milliseconds, 0.001 to 3,600,000) and
// optional loss (fraction 0..1, the higher of the two ways),
// a_loss_source and b_loss_source (who measured the loss of a's, b's
// sends: absent = the probes, "tunnels", "bench" or "declared"),
// estimated (bool), age_s (seconds since
// measured) and a_window_bytes, b_window_bytes (the receive window a, b
// was measured to advertise on this path; absent or 0 = the node's
// window_bytes) and a_send_bps, b_send_bps (the rate a's, b's traffic
// to the other end was learnt to reach, bits/s; absent or 0 = unknown;
// a_send_age_s, b_send_age_s: how old, seconds; a_send_source,
// b_send_source: who learnt it, absent or "tunnels", "bench", "probe" or
// "received": the other end, from what its tunnels received).
// Each unordered pair may appear once.
//
// Decoding is strict: unknown fields, duplicate keys, duplicate pairs,
// pairs naming unknown nodes, non-positive RTTs and out-of-range numbers
// are errors naming the node or the rtt_ms entry.
package planner
