package rules

import (
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// none is a rule index that no rule has: every real index is below it.
const none = math.MaxInt32

// Set is a loaded rule file: its rules in order and the indexes that find
// the first matching rule without trying every rule. Each index maps what
// a destination shows (a name, a suffix of it, its address under a prefix
// length, its port) to the smallest rule index that matches it; Match
// takes the smallest over all of them, which is the first rule in file
// order that matches. A Set is read-only once built.
type Set struct {
	// File names the rule file in messages ("" for rules not read from a
	// file).
	File string
	// Rules are the rules in file order.
	Rules []Rule
	// Warnings are what is legal but likely a mistake (rules after MATCH,
	// which can never decide).
	Warnings []string

	exact    map[string]int32  // DOMAIN: name -> first rule
	suffix   map[string]int32  // DOMAIN-SUFFIX: suffix -> first rule
	keywords []indexed[string] // in file order (the PAC file scans them)
	kw       keywordIndex      // the keywords' automaton, built by finish
	v4, v6   prefixTable
	ports    []indexed[[]portRange]
	geo      []indexed[string] // GEOIP country codes (upper case)
	geoDB    *GeoIP
	matchAll int32   // MATCH's index, or none
	ipRules  []int32 // the indexes of the IP rules, in order
	portIdx  []int32 // the indexes of the DST-PORT rules, in order

	pacOnce sync.Once // WritePAC's JavaScript, built once
	pac     []byte
	pacErr  error
}

type indexed[T any] struct {
	v   T
	idx int32
}

type portRange struct{ lo, hi uint16 }

// prefixTable finds the first rule among the prefixes that hold an
// address: one map per prefix length present, from the address's leading
// bits (masked) to the smallest rule index with that prefix. A lookup
// costs one map probe per length present (at most 33 or 129, typically a
// few dozen), whatever the number of prefixes.
type prefixTable struct {
	lens []int                      // prefix lengths present, ascending
	byLn map[int]map[[16]byte]int32 // length -> masked address -> first rule
}

func (t *prefixTable) add(p netip.Prefix, idx int32) {
	if t.byLn == nil {
		t.byLn = map[int]map[[16]byte]int32{}
	}
	m := t.byLn[p.Bits()]
	if m == nil {
		m = map[[16]byte]int32{}
		t.byLn[p.Bits()] = m
		t.lens = append(t.lens, p.Bits())
		slices.Sort(t.lens)
	}
	k := p.Masked().Addr().As16()
	if old, ok := m[k]; !ok || idx < old {
		m[k] = idx
	}
}

// first is the smallest rule index among the prefixes holding a (an
// address of the table's family), below best; best when none is.
func (t *prefixTable) first(a netip.Addr, best int32) int32 {
	for _, bits := range t.lens {
		p, _ := a.Prefix(bits) // bits fit a's family: the table holds one family
		if idx, ok := t.byLn[bits][p.Addr().As16()]; ok && idx < best {
			best = idx
		}
	}
	return best
}

func newSet(file string) *Set {
	return &Set{File: file, exact: map[string]int32{}, suffix: map[string]int32{}, matchAll: none}
}

// add indexes r, the next rule in file order.
func (s *Set) add(r Rule, prefixes []netip.Prefix, ports []portRange) {
	idx := int32(len(s.Rules))
	s.Rules = append(s.Rules, r)
	if s.matchAll != none {
		s.Warnings = append(s.Warnings, s.where(r.Line)+": never decides: MATCH on line "+
			strconv.Itoa(s.Rules[s.matchAll].Line)+" matches every destination first")
	}
	switch r.Kind {
	case KindDomain:
		setFirst(s.exact, r.Value, idx)
	case KindDomainSuffix:
		setFirst(s.suffix, r.Value, idx)
	case KindDomainKeyword:
		s.keywords = append(s.keywords, indexed[string]{r.Value, idx})
	case KindIPCIDR, KindIPCIDR6, KindGeoIP:
		s.ipRules = append(s.ipRules, idx)
		for _, p := range prefixes {
			if p.Addr().Is4() {
				s.v4.add(p, idx)
			} else {
				s.v6.add(p, idx)
			}
		}
		if r.Kind == KindGeoIP && len(prefixes) == 0 {
			s.geo = append(s.geo, indexed[string]{r.Value, idx})
		}
	case KindDstPort:
		s.portIdx = append(s.portIdx, idx)
		s.ports = append(s.ports, indexed[[]portRange]{ports, idx})
	case KindMatch:
		if s.matchAll == none {
			s.matchAll = idx
		}
	}
}

// finish builds what indexes all the rules at once, once the last is
// added.
func (s *Set) finish() {
	s.kw = buildKeywords(s.keywords)
}

func setFirst(m map[string]int32, k string, idx int32) {
	if old, ok := m[k]; !ok || idx < old {
		m[k] = idx
	}
}

// where is "FILE:LINE" for messages.
func (s *Set) where(line int) string {
	f := s.File
	if f == "" {
		f = "rules"
	}
	return f + ":" + strconv.Itoa(line)
}

// MatchAddr decides for dst, host:port as a SOCKS5 or HTTP client asked
// for it (a name, or a literal address, IPv6 in brackets). A dst without
// a port is taken as a bare host: DST-PORT rules then cannot match.
func (s *Set) MatchAddr(dst string) Decision {
	host, portStr, err := net.SplitHostPort(dst)
	if err != nil {
		return s.Match(strings.Trim(dst, "[]"), 0)
	}
	port, _ := strconv.ParseUint(portStr, 10, 16)
	return s.Match(host, uint16(port))
}

// Match decides for host (a name, or a literal IP address without
// brackets) and port (0: unknown; DST-PORT rules do not match it).
func (s *Set) Match(host string, port uint16) Decision {
	best := s.matchAll
	var addr netip.Addr
	isIP := false
	if maybeIP(host) {
		var err error
		addr, err = netip.ParseAddr(host)
		isIP = err == nil
	}
	if isIP {
		best = s.firstIP(addr.WithZone("").Unmap(), best)
	} else {
		best = s.firstName(normalName(host), best)
	}
	if port != 0 {
		best = s.firstPort(port, best)
	}
	d := Decision{}
	if best != none {
		d.Rule = &s.Rules[best]
		d.Action = d.Rule.Action
	}
	if !isIP {
		d.UnresolvedIPRules = countBelow(s.ipRules, best)
	}
	if port == 0 {
		d.NoPortRules = countBelow(s.portIdx, best)
	}
	return d
}

// maybeIP says whether host may be a literal address: it has a colon
// (IPv6), or only digits and dots. netip.ParseAddr allocates the error it
// returns for a name: the lookup of a name skips it.
func maybeIP(host string) bool {
	if strings.IndexByte(host, ':') >= 0 {
		return true
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}

// normalName is host as the domain rules hold names: lower case, without
// a trailing dot. It allocates only when host has upper case letters.
func normalName(host string) string {
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// firstName is the first domain rule matching name, below best.
func (s *Set) firstName(name string, best int32) int32 {
	if idx, ok := s.exact[name]; ok && idx < best {
		best = idx
	}
	// Every suffix of name at a label boundary, name itself first:
	// DOMAIN-SUFFIX,example.com matches example.com and a.example.com,
	// not badexample.com.
	for rest := name; rest != ""; {
		if idx, ok := s.suffix[rest]; ok && idx < best {
			best = idx
		}
		dot := strings.IndexByte(rest, '.')
		if dot < 0 {
			break
		}
		rest = rest[dot+1:]
	}
	if len(s.keywords) > 0 && s.keywords[0].idx < best {
		best = min(best, s.kw.firstIn(name))
	}
	return best
}

// firstIP is the first IP rule matching a literal address, below best.
func (s *Set) firstIP(a netip.Addr, best int32) int32 {
	if a.Is4() {
		best = s.v4.first(a, best)
	} else {
		best = s.v6.first(a, best)
	}
	if len(s.geo) == 0 || s.geo[0].idx >= best || s.geoDB == nil {
		return best
	}
	code := s.geoDB.Country(a)
	if code == "" {
		return best
	}
	for _, g := range s.geo {
		if g.idx >= best {
			break
		}
		if g.v == code {
			return g.idx
		}
	}
	return best
}

// firstPort is the first DST-PORT rule matching port, below best.
func (s *Set) firstPort(port uint16, best int32) int32 {
	for _, p := range s.ports {
		if p.idx >= best {
			break
		}
		for _, r := range p.v {
			if port >= r.lo && port <= r.hi {
				return p.idx
			}
		}
	}
	return best
}

// countBelow counts the indexes in idxs (ascending) below limit.
func countBelow(idxs []int32, limit int32) int {
	n, _ := slices.BinarySearch(idxs, limit)
	return n
}

// Counts is how many rules of each kind the set holds, in Kind order,
// leaving out kinds it has none of: "DOMAIN-SUFFIX 1000, IP-CIDR 20".
func (s *Set) Counts() string {
	var n [len(kindNames)]int
	for _, r := range s.Rules {
		n[r.Kind]++
	}
	var parts []string
	for k, c := range n {
		if c > 0 {
			parts = append(parts, Kind(k).String()+" "+strconv.Itoa(c))
		}
	}
	return strings.Join(parts, ", ")
}

// Relays lists every relay a CHAIN rule names, once each, in the order
// they first appear.
func (s *Set) Relays() []string {
	var out []string
	for _, r := range s.Rules {
		for _, name := range r.Action.Relays {
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}
