package lab

// The lab's namespaces and the emulated links between them.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/relaymesh/relaymesh/pkg/lab/topology"
	"github.com/relaymesh/relaymesh/pkg/lab/wanemu"
)

func (l *Lab) setupNode(n *Node) error {
	_ = wanemu.DelNetns(n.Netns) // left over from a crash
	if err := wanemu.AddNetns(n.Netns); err != nil {
		return err
	}
	if err := wanemu.AddAddr(n.Netns, "lo", n.Addr); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	for k, v := range l.topo.Sysctls(n.Name) {
		if err := wanemu.SetSysctl(n.Netns, k, v); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	// /etc/netns/<netns>/hosts is mounted over /etc/hosts by `ip netns exec`.
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n::1 localhost\n")
	for _, name := range l.topo.NodeNames() {
		fmt.Fprintf(&hosts, "%s %s\n", l.Nodes[name].Addr, name)
	}
	etc := filepath.Join("/etc/netns", n.Netns)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(etc, "hosts"), []byte(hosts.String()), 0o644)
}

// linkParams is one direction of a link; a cut link (down) drops every
// packet.
func linkParams(lc topology.Link, delayNs int64, down bool) wanemu.Params {
	p := wanemu.Params{
		DelayNs:    delayNs,
		RateBps:    int64(lc.RateMbit * 1e6), // 0: wanemu.DefaultRateBps
		QueueBytes: lc.QueueKB * 1024,
		Loss:       lc.Loss,
		JitterNs:   int64(lc.JitterMs * 1e6),
	}
	if down {
		p.Loss = 1
	}
	return p
}

// checkSlots refuses, before anything is built, a topology with a link
// that needs more packet slots than the emulator holds (wanemu.SlotsFor),
// naming each such link and direction.
func checkSlots(topo *topology.Topology) error {
	var errs []error
	for i, lc := range topo.Links {
		abNs, baNs := lc.OneWayNs()
		ab, ba := linkParams(lc, abNs, false), linkParams(lc, baNs, false)
		if _, err := wanemu.SlotsFor(ab, ba); err != nil {
			errs = append(errs, fmt.Errorf("links[%d] %s->%s: %w", i, lc.Between[0], lc.Between[1], err))
		}
		if _, err := wanemu.SlotsFor(ba, ab); err != nil {
			errs = append(errs, fmt.Errorf("links[%d] %s->%s: %w", i, lc.Between[1], lc.Between[0], err))
		}
	}
	return errors.Join(errs...)
}

func (l *Lab) addLink(i int, lc topology.Link) error {
	a, b := l.Nodes[lc.Between[0]], l.Nodes[lc.Between[1]]
	abNs, baNs := lc.OneWayNs()
	// One interface name per link index: unique in every namespace.
	ifname := "wan" + strconv.Itoa(i)
	wl, err := wanemu.NewLink(
		wanemu.Endpoint{Netns: a.Netns, Ifname: ifname, Addr: a.Addr},
		wanemu.Endpoint{Netns: b.Netns, Ifname: ifname, Addr: b.Addr},
		linkParams(lc, abNs, false), linkParams(lc, baNs, false))
	if err != nil {
		return fmt.Errorf("links[%d] %s-%s: %w", i, a.Name, b.Name, err)
	}
	l.links = append(l.links, &runningLink{cfg: lc, link: wl})
	return nil
}

// LinkUpdate changes some parameters of a running link; nil fields keep
// their value. Between may name the nodes in either order; DelayMs is then
// read in that order too.
type LinkUpdate struct {
	Between  [2]string `json:"between"`
	RTTMs    *float64  `json:"rtt_ms,omitempty"`
	DelayMs  []float64 `json:"delay_ms,omitempty"` // [from Between[0], from Between[1]], ms
	RateMbit *float64  `json:"rate_mbit,omitempty"`
	Loss     *float64  `json:"loss,omitempty"`
	QueueKB  *int      `json:"queue_kb,omitempty"`
	JitterMs *float64  `json:"jitter_ms,omitempty"`
	// Down cuts the link (true: every packet is dropped both ways, as when
	// a host vanishes or a path is cut; no FIN, no RST) or restores it
	// (false) with its parameters as they were.
	Down *bool `json:"down,omitempty"`
}

// UpdateLink applies u to the running link it names, after checking the
// result against the topology rules, and returns the link's new settings.
func (l *Lab) UpdateLink(u LinkUpdate) (topology.Link, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, rl := range l.links {
		lc := rl.cfg
		reversed := lc.Between == [2]string{u.Between[1], u.Between[0]}
		if lc.Between != u.Between && !reversed {
			continue
		}
		if u.RTTMs != nil {
			lc.RTTMs, lc.DelayMs = *u.RTTMs, nil
		}
		if u.DelayMs != nil {
			lc.DelayMs, lc.RTTMs = slices.Clone(u.DelayMs), 0
			if reversed && len(lc.DelayMs) == 2 {
				lc.DelayMs[0], lc.DelayMs[1] = lc.DelayMs[1], lc.DelayMs[0]
			}
		}
		if u.RateMbit != nil {
			lc.RateMbit = *u.RateMbit
		}
		if u.Loss != nil {
			lc.Loss = *u.Loss
		}
		if u.QueueKB != nil {
			lc.QueueKB = *u.QueueKB
		}
		if u.JitterMs != nil {
			lc.JitterMs = *u.JitterMs
		}
		// Validate the topology as it would be, so the rules stay in one place.
		next := *l.topo
		next.Links = slices.Clone(l.topo.Links)
		next.Links[i] = lc
		if err := next.Validate(); err != nil {
			return topology.Link{}, err
		}
		down := rl.down
		if u.Down != nil {
			down = *u.Down
		}
		ab, ba := lc.OneWayNs()
		if err := rl.link.Set(linkParams(lc, ab, down), linkParams(lc, ba, down)); err != nil {
			return topology.Link{}, fmt.Errorf("links[%d] %s-%s: %w", i, lc.Between[0], lc.Between[1], err)
		}
		rl.down = down
		rl.cfg = lc
		l.topo = &next
		return lc, nil
	}
	return topology.Link{}, fmt.Errorf("lab %s has no link between %s and %s", l.Name, u.Between[0], u.Between[1])
}
