// Package rules is relaymesh's one rule engine: an ordered rule set in the
// syntax mihomo/Clash users keep (DOMAIN, DOMAIN-SUFFIX, DOMAIN-KEYWORD,
// IP-CIDR, IP-CIDR6, DST-PORT, GEOIP, MATCH), each rule mapping a
// destination to an Action: DIRECT, PLAN (relaymesh's per-destination
// plan), CHAIN:r1,r2 (those relays, in order) or REJECT. relayctl connect,
// relays with routing: plan and relayctl pac all decide with it
// (docs/rules.md).
//
// Its invariants:
//   - The first rule in file order that matches decides, as in Clash; a
//     destination no rule matches takes the plan (what relaymesh does
//     without a rule file).
//   - Domain rules match the name the client asked for; IP rules (IP-CIDR,
//     IP-CIDR6, GEOIP) match only a literal IP destination. A name is never
//     resolved to match a rule: that would send it to this host's resolver
//     when the point of the chain is to have the relay resolve it
//     (no-resolve is accepted, and is what every IP rule does).
//   - Matching is pure and allocation-free for a lowercase name: a set is
//     read-only once loaded and safe for concurrent use.
package rules

import (
	"strconv"
	"strings"
)

// Verb is what an action does with a destination.
type Verb uint8

const (
	// Plan routes by relaymesh's per-destination plan (or connect --dst's
	// one plan): what every destination takes without a rule file.
	Plan Verb = iota
	// Direct dials the destination from this host (relayctl connect) or
	// this relay (routing: plan), through no relay.
	Direct
	// Chain goes through the named relays, in order, with the native
	// protocol.
	Chain
	// Reject refuses the request: SOCKS5 reply 0x02 (not allowed by
	// ruleset), HTTP 403.
	Reject
)

// Action is what a rule does with the destinations it matches.
type Action struct {
	Verb Verb
	// Relays are a Chain's relays by registry name, in order.
	Relays []string
}

// String is the action as a rule file writes it.
func (a Action) String() string {
	switch a.Verb {
	case Direct:
		return "DIRECT"
	case Chain:
		return "CHAIN:" + strings.Join(a.Relays, ",")
	case Reject:
		return "REJECT"
	default:
		return "PLAN"
	}
}

// Kind is a rule's type, as the rule file names it.
type Kind uint8

const (
	KindDomain Kind = iota + 1
	KindDomainSuffix
	KindDomainKeyword
	KindIPCIDR
	KindIPCIDR6
	KindDstPort
	KindGeoIP
	KindMatch
)

var kindNames = [...]string{
	KindDomain:        "DOMAIN",
	KindDomainSuffix:  "DOMAIN-SUFFIX",
	KindDomainKeyword: "DOMAIN-KEYWORD",
	KindIPCIDR:        "IP-CIDR",
	KindIPCIDR6:       "IP-CIDR6",
	KindDstPort:       "DST-PORT",
	KindGeoIP:         "GEOIP",
	KindMatch:         "MATCH",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// matchesIP says whether k matches on the destination's address, which
// only a literal IP destination has.
func (k Kind) matchesIP() bool { return k == KindIPCIDR || k == KindIPCIDR6 || k == KindGeoIP }

// Rule is one line of a rule file.
type Rule struct {
	// Line is its line number in the file, from 1.
	Line int
	// Text is the line as written, without surrounding space or a YAML
	// list's "- ".
	Text   string
	Kind   Kind
	Value  string // normalised: a lowercase name, a masked prefix, a port list, a country code
	Action Action
}

// Decision is what a Set decides for one destination.
type Decision struct {
	// Rule is the rule that matched; nil when none did (Action is then
	// Plan, the default).
	Rule   *Rule
	Action Action
	// UnresolvedIPRules counts the IP rules before the deciding one (all
	// of them when none matched) that a name destination could not be
	// checked against: names are not resolved to match rules.
	UnresolvedIPRules int
	// NoPortRules counts the DST-PORT rules before the deciding one that
	// were not checked because the destination had no port (relayctl
	// rules test HOST).
	NoPortRules int
}

// Describe is the decision in a few words, for logs: the rule's line and
// text and the action, or that none matched.
func (d Decision) Describe() string {
	if d.Rule == nil {
		return "no rule matched: PLAN (the default)"
	}
	return "line " + strconv.Itoa(d.Rule.Line) + ": " + d.Rule.Text
}
