package rules

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// Options are what a rule file may need besides its text.
type Options struct {
	// GeoIPFile is a MaxMind-format country database (GeoLite2-Country,
	// DB-IP's country lite, Clash's Country.mmdb) for GEOIP rules; "":
	// none, and a GEOIP rule other than GEOIP,LAN is an error.
	GeoIPFile string
}

// Load reads and checks a rule file. Its error names every bad line as
// FILE:LINE: what is wrong.
func Load(path string, o Options) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var db *GeoIP
	if o.GeoIPFile != "" {
		if db, err = OpenGeoIP(o.GeoIPFile); err != nil {
			return nil, err
		}
	}
	return Parse(f, path, db)
}

// maxErrors bounds the bad lines one error names: a file that is not a
// rule file at all should not print ten thousand of them.
const maxErrors = 20

// Parse reads rules from r, one a line: TYPE,VALUE,ACTION[,no-resolve], or
// MATCH,ACTION. Blank lines and lines starting with # are skipped, as are
// a Clash config's "rules:" and a rule provider's "payload:" header, and a
// line may be a YAML list item ("- DOMAIN,example.com,DIRECT", quoted or
// not), so a Clash rules section pastes in as it is. file names the source
// in errors and warnings; db serves GEOIP rules (nil: only GEOIP,LAN).
func Parse(r io.Reader, file string, db *GeoIP) (*Set, error) {
	s := newSet(file)
	s.geoDB = db
	var errs []error
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := ruleText(sc.Text())
		if text == "" {
			continue
		}
		if err := s.parseLine(line, text); err != nil {
			if len(errs) == maxErrors {
				errs = append(errs, fmt.Errorf("%s: more bad lines follow", file))
				break
			}
			errs = append(errs, fmt.Errorf("%s: %w", s.where(line), err))
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("%s: line %d: %w", file, line+1, err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s.finish()
	return s, nil
}

// ruleText is a line's rule, "" for a line that holds none.
func ruleText(line string) string {
	t := strings.TrimSpace(line)
	if t == "" || strings.HasPrefix(t, "#") || t == "rules:" || t == "payload:" {
		return ""
	}
	if rest, ok := strings.CutPrefix(t, "- "); ok {
		t = strings.TrimSpace(rest)
		if len(t) >= 2 && (t[0] == '"' || t[0] == '\'') && t[len(t)-1] == t[0] {
			t = t[1 : len(t)-1]
		}
	}
	return t
}

// parseLine parses and indexes one rule.
func (s *Set) parseLine(line int, text string) error {
	fields := strings.Split(text, ",")
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	kind, err := parseKind(fields[0])
	if err != nil {
		return err
	}
	r := Rule{Line: line, Text: text, Kind: kind}
	if kind == KindMatch {
		if len(fields) < 2 || fields[1] == "" {
			return errors.New("MATCH wants an action: MATCH,PLAN (or DIRECT, CHAIN:relay,..., REJECT)")
		}
		act, rest, err := parseAction(fields[1:])
		if err != nil {
			return err
		}
		if len(rest) > 0 {
			return fmt.Errorf("MATCH: unexpected %q after the action", strings.Join(rest, ","))
		}
		r.Action = act
		s.add(r, nil, nil)
		return nil
	}
	if len(fields) < 2 || fields[1] == "" {
		return fmt.Errorf("%s wants a value and an action: %s,VALUE,ACTION", kind, kind)
	}
	if len(fields) < 3 || fields[2] == "" {
		return fmt.Errorf("%s,%s has no action: add ,DIRECT ,PLAN ,CHAIN:relay,... or ,REJECT (a rule provider's payload lists rules without one)",
			kind, fields[1])
	}
	act, rest, err := parseAction(fields[2:])
	if err != nil {
		return err
	}
	for _, opt := range rest {
		if !strings.EqualFold(opt, "no-resolve") {
			return fmt.Errorf("%q: not an option (the one option is no-resolve, for IP rules)", opt)
		}
		if !kind.matchesIP() {
			return fmt.Errorf("no-resolve applies to IP-CIDR, IP-CIDR6 and GEOIP rules, not %s", kind)
		}
	}
	r.Action = act
	value, prefixes, ports, err := parseValue(kind, fields[1], s.geoDB)
	if err != nil {
		return fmt.Errorf("%s,%s: %w", kind, fields[1], err)
	}
	r.Value = value
	s.add(r, prefixes, ports)
	return nil
}

// unsupported are Clash rule types relaymesh does not take, with why.
var unsupported = map[string]string{
	"RULE-SET":     "inline the provider's payload (its lines, each with an action) instead",
	"GEOSITE":      "list the domains as DOMAIN-SUFFIX rules instead",
	"SRC-IP-CIDR":  "rules match the destination, not the client",
	"SRC-PORT":     "rules match the destination, not the client",
	"IN-PORT":      "rules match the destination, not the listener",
	"PROCESS-NAME": "a proxy does not see the client's process",
	"PROCESS-PATH": "a proxy does not see the client's process",
	"DOMAIN-REGEX": "write DOMAIN, DOMAIN-SUFFIX or DOMAIN-KEYWORD rules instead",
	"IP-ASN":       "use IP-CIDR rules for the ASN's prefixes",
	"NETWORK":      "relaymesh carries TCP only through rules",
	"AND":          "logical rules are not supported",
	"OR":           "logical rules are not supported",
	"NOT":          "logical rules are not supported",
}

func parseKind(s string) (Kind, error) {
	u := strings.ToUpper(s)
	if u == "FINAL" {
		return KindMatch, nil // Clash's old name for MATCH
	}
	for k, name := range kindNames {
		if name != "" && name == u {
			return Kind(k), nil
		}
	}
	if why, ok := unsupported[u]; ok {
		return 0, fmt.Errorf("%s is not supported: %s", u, why)
	}
	return 0, fmt.Errorf("%q is not a rule type: want DOMAIN, DOMAIN-SUFFIX, DOMAIN-KEYWORD, IP-CIDR, IP-CIDR6, DST-PORT, GEOIP or MATCH", s)
}

// parseAction parses the action at the start of fields and returns the
// fields after it (options). CHAIN:r1,r2 takes every field up to the first
// option (no-resolve) as a relay.
func parseAction(fields []string) (Action, []string, error) {
	f := fields[0]
	u := strings.ToUpper(f)
	switch {
	case u == "DIRECT":
		return Action{Verb: Direct}, fields[1:], nil
	case u == "PLAN":
		return Action{Verb: Plan}, fields[1:], nil
	case u == "REJECT":
		return Action{Verb: Reject}, fields[1:], nil
	case strings.HasPrefix(u, "REJECT-"):
		return Action{}, nil, fmt.Errorf("%s: write REJECT (relaymesh refuses with a reply: SOCKS5 0x02, HTTP 403)", f)
	case strings.HasPrefix(u, "CHAIN:"):
		relays := []string{f[len("CHAIN:"):]}
		rest := fields[1:]
		for len(rest) > 0 && !strings.EqualFold(rest[0], "no-resolve") {
			relays = append(relays, rest[0])
			rest = rest[1:]
		}
		for _, r := range relays {
			if !validRelayName(r) {
				return Action{}, nil, fmt.Errorf("CHAIN: %q is not a relay name (CHAIN:tokyo,osaka names relays of the fleet, in order)", r)
			}
		}
		return Action{Verb: Chain, Relays: relays}, rest, nil
	}
	return Action{}, nil, fmt.Errorf("%q is not an action: want DIRECT, PLAN (the per-destination plan), CHAIN:relay,... (these relays, in order) or REJECT; a Clash proxy or group becomes PLAN or a CHAIN", f)
}

// validRelayName accepts what a fleet names a relay with: no spaces,
// commas or control characters.
func validRelayName(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f || r == ',' || r == '#' })
}

// parseValue checks and normalises a rule's value: the name, the
// prefixes an IP rule adds to the tables, the port ranges.
func parseValue(kind Kind, v string, db *GeoIP) (string, []netip.Prefix, []portRange, error) {
	switch kind {
	case KindDomain, KindDomainSuffix:
		name, err := parseDomain(v)
		return name, nil, nil, err
	case KindDomainKeyword:
		k := strings.ToLower(v)
		if strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
			return "", nil, nil, errors.New("a keyword is part of a name: letters, digits, '-', '.', '_'")
		}
		return k, nil, nil, nil
	case KindIPCIDR, KindIPCIDR6:
		p, err := netip.ParsePrefix(v)
		if err != nil {
			if _, aerr := netip.ParseAddr(v); aerr == nil {
				return "", nil, nil, fmt.Errorf("want a prefix: %s/32 (IPv4) or %s/128 (IPv6) for one address", v, v)
			}
			return "", nil, nil, errors.New("not a CIDR prefix (e.g. 10.0.0.0/8, 2001:db8::/32)")
		}
		if p.Addr().Zone() != "" {
			return "", nil, nil, errors.New("a prefix has no zone")
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			// An IPv4-mapped prefix is the IPv4 prefix: destinations are
			// unmapped before matching.
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		p = p.Masked()
		return p.String(), []netip.Prefix{p}, nil, nil
	case KindDstPort:
		ports, err := parsePorts(v)
		return v, nil, ports, err
	case KindGeoIP:
		code := strings.ToUpper(v)
		if code == "LAN" {
			return code, LANPrefixes, nil, nil
		}
		if len(code) != 2 || !isUpperAlpha(code) {
			return "", nil, nil, errors.New("want a two-letter country code (ISO 3166-1, e.g. JP) or LAN")
		}
		if db == nil {
			return "", nil, nil, errors.New("GEOIP needs a MaxMind-format country database: give --geoip FILE (relayd: planning.geoip)")
		}
		return code, nil, nil, nil
	}
	return "", nil, nil, fmt.Errorf("%s takes no value", kind)
}

// parseDomain is a DOMAIN or DOMAIN-SUFFIX value as names are matched:
// lower case, ASCII (an internationalised name in its xn-- form, as
// clients send it), without a trailing dot.
func parseDomain(v string) (string, error) {
	if strings.HasPrefix(v, ".") || strings.HasPrefix(v, "*") || strings.HasPrefix(v, "+") {
		return "", errors.New("write the domain without a leading dot or wildcard: DOMAIN-SUFFIX,example.com matches example.com and every name under it")
	}
	if _, err := netip.ParseAddr(v); err == nil {
		return "", errors.New("an IP address: write IP-CIDR," + v + "/32 (or /128), which matches it as a literal destination")
	}
	name := strings.ToLower(strings.TrimSuffix(v, "."))
	if strings.ContainsFunc(name, func(r rune) bool { return r >= 0x80 }) {
		a, err := idna.Lookup.ToASCII(name)
		if err != nil {
			return "", fmt.Errorf("not a domain name: %v", err)
		}
		name = a
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || strings.ContainsFunc(label, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}) {
			return "", errors.New("not a domain name: labels of letters, digits, '-' and '_' between dots")
		}
	}
	return name, nil
}

// parsePorts parses a DST-PORT value: ports and ranges joined by '/', as
// mihomo writes them (80, 8000-9000, 80/443/8000-9000).
func parsePorts(v string) ([]portRange, error) {
	var out []portRange
	for _, part := range strings.Split(v, "/") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
		}
		if err1 != nil || err2 != nil || a == 0 || b < a {
			return nil, fmt.Errorf("%q: want a port 1-65535, a range 8000-9000, or several joined by / (80/443)", part)
		}
		out = append(out, portRange{uint16(a), uint16(b)})
	}
	return out, nil
}

func isUpperAlpha(s string) bool {
	for _, r := range s {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

// LANPrefixes are what GEOIP,LAN matches: addresses that never leave the
// local network (RFC 1918 and fc00::/7, loopback, link-local, CGNAT,
// unspecified).
var LANPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("::/127"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
}
