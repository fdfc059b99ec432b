package relay

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/hostnet"
	"github.com/relaymesh/relaymesh/pkg/packettrain"
	"github.com/relaymesh/relaymesh/pkg/registry"
)

// A relay measures the capacity of its sends to a peer relay on demand
// (GET /v1/capacity?to=PEER): it asks the peer over the admin API to
// expect a measurement (GET /v1/capacity/expect: a nonce, and the UDP port
// of the peer's relay listener), sends packettrain.Trains trains of UDP
// datagrams back to back to it, asks the peer when they arrived
// (GET /v1/capacity/arrivals) and estimates the rate itself
// (pkg/packettrain). The peer counts only datagrams with a nonce it issued
// and answers nothing over UDP: no stranger feeds it arrivals, and no
// datagram of anyone's makes it send one. What it learnt is kept for
// capacityMaxAge and published with its pairs (docs/planning.md, "The
// capacity probe").
const (
	// capacityMaxAge is how long a measurement stands: a path's capacity
	// changes slowly, and the budget allows a few measurements an hour.
	capacityMaxAge = time.Hour
	// capacityBudgetBytes is what a relay lets capacity trains cost it in
	// any hour, sent and received apart: three measurements each way
	// (packettrain.MaxMeasurementBytes, 149,760 bytes), so at most 898,560
	// bytes of trains a relay an hour whatever the fleet's size.
	capacityBudgetBytes = 3 * packettrain.MaxMeasurementBytes
	// capacityBudgetWindow is the budget's window: any hour, not a
	// refilling bucket, so no hour ever sees more than the budget.
	capacityBudgetWindow = time.Hour
	// expectTTL is how long an issued nonce waits for its trains and its
	// arrivals request; maxExpectations bounds those waiting at once.
	expectTTL       = 5 * time.Second
	maxExpectations = 8
	// arrivalsSettle is how long an arrivals request waits for datagrams
	// still missing (lost ones never come).
	arrivalsSettle = 300 * time.Millisecond
	// trainGap separates two trains so that the first drains from the
	// bottleneck's queue before the next arrives at 20 Mbit/s and more;
	// slower, the trains queue behind each other, which keeps the
	// bottleneck busy and their spacing its own all the same.
	trainGap = 20 * time.Millisecond
	// capacityProbeTimeout bounds one measurement, from the expect request
	// to the estimate.
	capacityProbeTimeout = 1800 * time.Millisecond
)

// Capacity probing on or off (ProbeConfig.Capacity).
const (
	CapacityOn  = "on"
	CapacityOff = "off"
)

// byteBudget allows at most limitBytes in any window.
type byteBudget struct {
	mu         sync.Mutex
	limitBytes int64
	window     time.Duration
	spent      []spend // oldest first
}

type spend struct {
	at    time.Time
	bytes int64
}

// take charges n bytes at now, or refuses with the time when they would
// fit.
func (b *byteBudget) take(now time.Time, n int64) (retryAt time.Time, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.spent) > 0 && now.Sub(b.spent[0].at) >= b.window {
		b.spent = b.spent[1:]
	}
	var used int64
	for _, s := range b.spent {
		used += s.bytes
	}
	if used+n > b.limitBytes {
		// The oldest spends fall out of the window first.
		free := b.limitBytes - used
		for _, s := range b.spent {
			free += s.bytes
			if free >= n {
				return s.at.Add(b.window), false
			}
		}
		return time.Time{}, false // never: n is over the limit
	}
	b.spent = append(b.spent, spend{at: now, bytes: n})
	return time.Time{}, true
}

// capacityResult is one measurement of this relay's sends to a peer.
type capacityResult struct {
	est packettrain.Estimate
	at  time.Time
}

// capacityProbes is a relay's side of the capacity probe: the UDP socket
// trains arrive on (beside the relay listener), the nonces it issued, its
// budgets and what it measured of its own sends.
type capacityProbes struct {
	s      *Server
	conn   *net.UDPConn
	kernel bool // the socket has kernel receive timestamps

	sendBudget, recvBudget byteBudget
	sending                chan struct{} // one measurement at a time

	mu       sync.Mutex
	expected map[packettrain.Nonce]*expectation
	results  map[string]capacityResult // by peer name
	wg       sync.WaitGroup
}

// expectation is one measurement this relay issued a nonce for.
type expectation struct {
	from     string
	deadline time.Time
	arrivals []packettrain.Arrival
	firstAt  time.Time
	// headerBytes is what IP and UDP added to its first datagram.
	headerBytes int
	done        chan struct{} // closed when every datagram arrived
}

// listenCapacity opens the UDP socket for trains on the relay listener's
// address, when probe.capacity is on and the relay has a relay listener;
// nil otherwise.
func (s *Server) listenCapacity() *capacityProbes {
	if s.cfg.Probe.Capacity == CapacityOff || s.relayLn == nil {
		return nil
	}
	addr := s.relayLn.Addr().(*net.TCPAddr)
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: addr.IP, Port: addr.Port})
	if err != nil {
		s.log.Warn("probe.capacity: cannot listen for trains; this relay will not measure or be measured", zap.Stringer("addr", addr), zap.Error(err))
		return nil
	}
	c := &capacityProbes{
		s: s, conn: conn,
		sendBudget: byteBudget{limitBytes: capacityBudgetBytes, window: capacityBudgetWindow},
		recvBudget: byteBudget{limitBytes: capacityBudgetBytes, window: capacityBudgetWindow},
		sending:    make(chan struct{}, 1),
		expected:   map[packettrain.Nonce]*expectation{},
		results:    map[string]capacityResult{},
	}
	c.kernel = setTimestamps(conn) == nil
	return c
}

// setTimestamps asks the kernel to stamp each datagram as it arrives
// (SO_TIMESTAMPNS): a receiver woken late by the scheduler still reads
// when each came.
func setTimestamps(conn *net.UDPConn) error {
	return hostnet.SetIntOn(conn, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
}

// start reads datagrams until close.
func (c *capacityProbes) start() {
	c.wg.Add(1)
	go c.serve()
}

// serve reads datagrams until the socket is closed.
func (c *capacityProbes) serve() {
	defer c.wg.Done()
	buf := make([]byte, packettrain.PayloadBytes+1)
	oob := make([]byte, 128)
	for {
		n, oobn, _, from, err := c.conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		at := time.Now()
		if c.kernel {
			if t, ok := kernelTimestamp(oob[:oobn]); ok {
				at = t
			}
		}
		c.arrived(buf[:n], at, ipHeaderBytes(from.Addr()))
	}
}

// ipHeaderBytes is what IP and UDP add to a datagram from addr: 28 bytes
// over IPv4, 48 over IPv6.
func ipHeaderBytes(addr netip.Addr) int {
	if addr.Unmap().Is4() {
		return 28
	}
	return 48
}

// kernelTimestamp is the SCM_TIMESTAMPNS in a datagram's control messages.
func kernelTimestamp(oob []byte) (time.Time, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(m.Data[0:8]))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:16]))
			return time.Unix(sec, nsec), true
		}
	}
	return time.Time{}, false
}

// arrived records one datagram: counted only under a nonce this relay
// issued and still waits for.
func (c *capacityProbes) arrived(b []byte, at time.Time, headerBytes int) {
	d, err := packettrain.Parse(b)
	if err != nil {
		c.s.metrics.capacityDatagrams.WithLabelValues("bad").Inc()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.expected[d.Nonce]
	if !ok || at.After(e.deadline) || len(e.arrivals) >= packettrain.Trains*packettrain.PacketsPerTrain {
		c.s.metrics.capacityDatagrams.WithLabelValues("unexpected").Inc()
		return
	}
	c.s.metrics.capacityDatagrams.WithLabelValues("counted").Inc()
	if e.firstAt.IsZero() {
		e.firstAt, e.headerBytes = at, headerBytes
	}
	e.arrivals = append(e.arrivals, packettrain.Arrival{Train: int(d.Train), Seq: int(d.Seq), SentNs: d.SentNs, AtNs: at.Sub(e.firstAt).Nanoseconds()})
	if len(e.arrivals) == packettrain.Trains*packettrain.PacketsPerTrain {
		close(e.done)
	}
}

// close stops reading and waits for the reader.
func (c *capacityProbes) close() {
	if c == nil {
		return
	}
	c.conn.Close()
	c.wg.Wait()
}

// capacityRoutes adds the capacity probe's admin API to mux.
func (s *Server) capacityRoutes(mux *http.ServeMux) {
	mux.Handle("GET "+adminapi.PathCapacity, s.adminAuth(s.viaPeer(s.serveCapacity)))
	mux.Handle("GET "+adminapi.PathCapacityExpect, s.adminAuth(http.HandlerFunc(s.serveCapacityExpect)))
	mux.Handle("GET "+adminapi.PathCapacityArrivals, s.adminAuth(http.HandlerFunc(s.serveCapacityArrivals)))
}

// capacityOff answers a capacity request on a relay that does not take
// part, and says whether it did.
func (s *Server) capacityOff(w http.ResponseWriter) bool {
	if s.capacity != nil {
		return false
	}
	why := "probe.capacity is off on this relay"
	if s.cfg.Probe.Capacity != CapacityOff {
		why = "this relay has no relay listener (or could not open its UDP port) to measure capacity over"
	}
	http.Error(w, why, http.StatusForbidden)
	return true
}

// serveCapacityExpect issues a nonce for a measurement from the asking
// relay (?from=NAME, for the logs), within the receive budget.
func (s *Server) serveCapacityExpect(w http.ResponseWriter, r *http.Request) {
	if s.capacityOff(w) {
		return
	}
	c := s.capacity
	from := r.URL.Query().Get("from")
	now := time.Now()
	c.mu.Lock()
	for n, e := range c.expected {
		if now.After(e.deadline) {
			delete(c.expected, n)
		}
	}
	busy := len(c.expected) >= maxExpectations
	c.mu.Unlock()
	if busy {
		s.metrics.capacityProbes.WithLabelValues("receive", "busy").Inc()
		http.Error(w, fmt.Sprintf("%d capacity measurements are waiting already", maxExpectations), http.StatusServiceUnavailable)
		return
	}
	if retry, ok := c.recvBudget.take(now, packettrain.MaxMeasurementBytes); !ok {
		s.metrics.capacityProbes.WithLabelValues("receive", "over_budget").Inc()
		http.Error(w, overBudget("receive", retry, now), http.StatusTooManyRequests)
		return
	}
	nonce := packettrain.NewNonce()
	c.mu.Lock()
	c.expected[nonce] = &expectation{from: from, deadline: now.Add(expectTTL), done: make(chan struct{})}
	c.mu.Unlock()
	s.metrics.capacityProbes.WithLabelValues("receive", "expected").Inc()
	writeJSON(w, packettrain.Expectation{
		Nonce: nonce.String(), Port: c.conn.LocalAddr().(*net.UDPAddr).Port,
		Trains: packettrain.Trains, PacketsPerTrain: packettrain.PacketsPerTrain, PayloadBytes: packettrain.PayloadBytes,
	})
}

// overBudget says why a measurement was refused.
func overBudget(way string, retry, now time.Time) string {
	return fmt.Sprintf("capacity probe budget spent: this relay %ss at most %d bytes of trains an hour (%d measurements); the next fits in %v",
		way, capacityBudgetBytes, capacityBudgetBytes/packettrain.MaxMeasurementBytes, retry.Sub(now).Round(time.Second))
}

// serveCapacityArrivals answers the arrivals of a nonce's trains, once
// all came or arrivalsSettle after the request, and forgets the nonce.
func (s *Server) serveCapacityArrivals(w http.ResponseWriter, r *http.Request) {
	if s.capacityOff(w) {
		return
	}
	c := s.capacity
	nonce, err := packettrain.ParseNonce(r.URL.Query().Get("nonce"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	e, ok := c.expected[nonce]
	c.mu.Unlock()
	if !ok {
		http.Error(w, "no capacity measurement expected under this nonce (never issued, answered already, or expired)", http.StatusNotFound)
		return
	}
	t := time.NewTimer(arrivalsSettle)
	defer t.Stop()
	select {
	case <-e.done:
	case <-t.C:
	case <-r.Context().Done():
	}
	c.mu.Lock()
	delete(c.expected, nonce)
	arrivals, headerBytes := slices.Clone(e.arrivals), e.headerBytes
	c.mu.Unlock()
	writeJSON(w, packettrain.Arrivals{Arrivals: arrivals, IPHeaderBytes: headerBytes, KernelTimestamps: c.kernel})
}

// serveCapacity measures this relay's sends to ?to=PEER (or answers the
// measurement kept from the last hour).
func (s *Server) serveCapacity(w http.ResponseWriter, r *http.Request) {
	if s.capacityOff(w) {
		return
	}
	to := r.URL.Query().Get("to")
	if to == "" || to == s.cfg.Name {
		http.Error(w, "to: want the name of another relay of the fleet", http.StatusBadRequest)
		return
	}
	ans := packettrain.Answer{From: s.cfg.Name, To: to}
	res, err := s.capacity.measure(r.Context(), to, time.Now())
	if err != nil {
		ans.Error = err.Error()
	} else {
		ans.SendBps, ans.SenderLimited, ans.AgeSec = res.est.TCPBps, res.est.SenderLimited, time.Since(res.at).Seconds()
	}
	writeJSON(w, ans)
}

// kept is the measurement of this relay's sends to peer from the last
// capacityMaxAge.
func (c *capacityProbes) kept(peer string, now time.Time) (capacityResult, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	res, ok := c.results[peer]
	if ok && now.Sub(res.at) > capacityMaxAge {
		delete(c.results, peer)
		return capacityResult{}, false
	}
	return res, ok
}

// measure is the measurement of this relay's sends to peer: the one kept,
// or a new one within the send budget and capacityProbeTimeout.
func (c *capacityProbes) measure(ctx context.Context, peer string, now time.Time) (capacityResult, error) {
	if res, ok := c.kept(peer, now); ok {
		return res, nil
	}
	ctx, cancel := context.WithTimeout(ctx, capacityProbeTimeout)
	defer cancel()
	select {
	case c.sending <- struct{}{}:
		defer func() { <-c.sending }()
	case <-ctx.Done():
		return capacityResult{}, fmt.Errorf("capacity to %s: another measurement held this relay: %w", peer, ctx.Err())
	}
	if res, ok := c.kept(peer, time.Now()); ok { // measured while this one waited
		return res, nil
	}
	rl, err := c.peer(ctx, peer)
	if err != nil {
		return capacityResult{}, err
	}
	if retry, ok := c.sendBudget.take(time.Now(), packettrain.MaxMeasurementBytes); !ok {
		c.s.metrics.capacityProbes.WithLabelValues("send", "over_budget").Inc()
		return capacityResult{}, errors.New(overBudget("send", retry, time.Now()))
	}
	est, err := c.trains(ctx, rl)
	if err != nil {
		c.s.metrics.capacityProbes.WithLabelValues("send", "error").Inc()
		c.s.log.Named("capacity").Info("capacity probe failed", zap.String("to", peer), zap.Error(err))
		return capacityResult{}, fmt.Errorf("capacity to %s: %w", peer, err)
	}
	res := capacityResult{est: est, at: time.Now()}
	c.mu.Lock()
	c.results[peer] = res
	c.mu.Unlock()
	c.s.metrics.capacityProbes.WithLabelValues("send", "measured").Inc()
	c.s.log.Named("capacity").Info("capacity measured", zap.String("to", peer), zap.Float64("send_bps", est.TCPBps),
		zap.Int("trains", est.Trains), zap.Bool("sender_limited", est.SenderLimited))
	return res, nil
}

// peer is the relay named peer in the registry, with a relay listener.
func (c *capacityProbes) peer(ctx context.Context, name string) (registry.Relay, error) {
	if c.s.measure == nil {
		return registry.Relay{}, errors.New("this relay has no registry (fleet or consul) to find peers in")
	}
	relays, err := c.s.measure.reg.Relays(ctx)
	if err != nil {
		return registry.Relay{}, fmt.Errorf("registry: %w", err)
	}
	i := slices.IndexFunc(relays, func(r registry.Relay) bool { return r.Name == name })
	if i < 0 || relays[i].Relay == "" || relays[i].Admin == "" {
		return registry.Relay{}, fmt.Errorf("no relay %s with a relay listener and an admin address in the registry", name)
	}
	return relays[i], nil
}

// trains runs one measurement to rl: expect, send, read the arrivals,
// estimate.
func (c *capacityProbes) trains(ctx context.Context, rl registry.Relay) (packettrain.Estimate, error) {
	admin := c.s.adminClient(capacityProbeTimeout)
	var exp packettrain.Expectation
	if err := c.adminGet(ctx, admin, rl, adminapi.PathCapacityExpect+"?from="+c.s.cfg.Name, &exp); err != nil {
		return packettrain.Estimate{}, err
	}
	if exp.Trains != packettrain.Trains || exp.PacketsPerTrain != packettrain.PacketsPerTrain || exp.PayloadBytes != packettrain.PayloadBytes {
		return packettrain.Estimate{}, fmt.Errorf("%s expects trains of another shape (%d×%d×%d B): another version", rl.Name, exp.Trains, exp.PacketsPerTrain, exp.PayloadBytes)
	}
	nonce, err := packettrain.ParseNonce(exp.Nonce)
	if err != nil {
		return packettrain.Estimate{}, err
	}
	relayAP, err := netip.ParseAddrPort(rl.Relay)
	if err != nil || exp.Port <= 0 || exp.Port > 65535 {
		return packettrain.Estimate{}, fmt.Errorf("%s's relay address %q or train port %d: unusable", rl.Name, rl.Relay, exp.Port)
	}
	if err := c.send(ctx, netip.AddrPortFrom(relayAP.Addr(), uint16(exp.Port)), nonce); err != nil {
		return packettrain.Estimate{}, err
	}
	var arr packettrain.Arrivals
	if err := c.adminGet(ctx, admin, rl, adminapi.PathCapacityArrivals+"?nonce="+exp.Nonce, &arr); err != nil {
		return packettrain.Estimate{}, err
	}
	return arr.Estimate()
}

// adminGet is a GET of path on rl's admin API, decoded into v.
func (c *capacityProbes) adminGet(ctx context.Context, admin *adminapi.Client, rl registry.Relay, path string, v any) error {
	body, err := admin.Get(ctx, rl.Name, rl.Admin, path, c.s.peerToken(), 1<<20)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

// send writes the trains to dst back to back, trainGap apart, from a
// socket the relay policy allows to reach dst.
func (c *capacityProbes) send(ctx context.Context, dst netip.AddrPort, nonce packettrain.Nonce) error {
	conn, err := c.s.relayPol.Dialer(net.Dialer{}).DialContext(ctx, "udp", dst.String())
	if err != nil {
		return fmt.Errorf("trains to %s: %w", dst, err)
	}
	defer conn.Close()
	buf := make([]byte, packettrain.PayloadBytes)
	start := time.Now()
	for t := range packettrain.Trains {
		if t > 0 {
			select {
			case <-time.After(trainGap):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		for seq := range packettrain.PacketsPerTrain {
			d := packettrain.Datagram{Nonce: nonce, Train: uint8(t), Seq: uint16(seq), SentNs: time.Since(start).Nanoseconds()}
			if _, err := conn.Write(d.Marshal(buf)); err != nil {
				return fmt.Errorf("trains to %s: %w", dst, err)
			}
		}
	}
	return nil
}

// withCapacity sets, on each of this relay's pairs that no tunnel taught a
// send rate, the capacity its trains measured to the peer in the last
// capacityMaxAge (SendSource registry.SendFromProbe). A tunnel's rate
// stands where there is one: it is what traffic got on the path, where a
// train measures the bottleneck's capacity, not what other traffic left
// of it.
func (c *capacityProbes) withCapacity(pairs []registry.Pair, now time.Time) []registry.Pair {
	if c == nil {
		return pairs
	}
	for i := range pairs {
		if pairs[i].SendBps > 0 {
			continue
		}
		if res, ok := c.kept(pairs[i].To, now); ok {
			pairs[i].SendBps, pairs[i].SendAt, pairs[i].SendSource = res.est.TCPBps, res.at, registry.SendFromProbe
		}
	}
	return pairs
}
