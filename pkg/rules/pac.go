package rules

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strconv"
)

// PAC action codes: what relaymeshAction, the function WritePAC writes,
// answers for a destination.
const (
	PACDirect = "D" // DIRECT rules
	PACProxy  = "P" // PLAN and CHAIN rules, and no rule matched: the proxy decides the chain
	PACReject = "R" // REJECT rules
)

// PACCode is the PAC action code of an action.
func PACCode(a Action) string {
	switch a.Verb {
	case Direct:
		return PACDirect
	case Reject:
		return PACReject
	}
	return PACProxy
}

// WritePAC writes the rule set as JavaScript for a PAC file: its tables,
// and relaymeshAction(url, host), which answers PACDirect, PACProxy or
// PACReject exactly as Match decides for the URL's host and port (the
// port the URL names, or its scheme's). It is Match's algorithm over the
// same tables: the first rule in file order among every table that
// matches. A name is never resolved (no dnsResolve, no isInNet): IP rules
// match literal addresses only, as in relayd and relayctl connect. GEOIP
// rules become the prefixes the database lists for their countries
// (a browser cannot read the database).
func (s *Set) WritePAC(w io.Writer) error {
	// Built once: connect serves the file on every request, and listing a
	// GeoIP database's networks takes a while.
	s.pacOnce.Do(func() {
		var b bytes.Buffer
		s.pacErr = s.writePAC(&b)
		s.pac = b.Bytes()
	})
	if s.pacErr != nil {
		return s.pacErr
	}
	_, err := w.Write(s.pac)
	return err
}

func (s *Set) writePAC(w io.Writer) error {
	bw := bufio.NewWriter(w)
	v4, v6 := s.v4, s.v6
	if len(s.geo) > 0 && s.geoDB != nil {
		v4, v6 = s.v4.clone(), s.v6.clone()
		first := map[string]int32{}
		for _, g := range s.geo {
			if _, ok := first[g.v]; !ok {
				first[g.v] = g.idx
			}
		}
		codes := map[string]bool{}
		for c := range first {
			codes[c] = true
		}
		for p, code := range s.geoDB.Networks(codes) {
			if p.Addr().Is4() {
				v4.add(p, first[code])
			} else {
				v6.add(p, first[code])
			}
		}
	}
	act := make([]byte, len(s.Rules))
	for i, r := range s.Rules {
		act[i] = PACCode(r.Action)[0]
	}
	fmt.Fprintf(bw, "// relaymesh rules: %d from %s (%s); first match wins, no match: the proxy\n", len(s.Rules), s.File, s.Counts())
	fmt.Fprintf(bw, "var rmAct = %s;\nvar rmNone = %d;\nvar rmAll = %d;\n", jsString(string(act)), none, s.matchAll) // rmAll: MATCH's rule, or rmNone
	bw.WriteString("var rmExact = rmMap([")
	writeStringMap(bw, s.exact)
	bw.WriteString("]);\nvar rmSuffix = rmMap([")
	writeStringMap(bw, s.suffix)
	bw.WriteString("]);\nvar rmKeywords = [")
	for i, k := range s.keywords {
		sep(bw, i)
		fmt.Fprintf(bw, "%s,%d", jsString(k.v), k.idx)
	}
	bw.WriteString("];\nvar rmPorts = [")
	for i, p := range s.ports {
		sep(bw, i)
		fmt.Fprintf(bw, "[%d", p.idx)
		for _, r := range p.v {
			fmt.Fprintf(bw, ",%d,%d", r.lo, r.hi)
		}
		bw.WriteString("]")
	}
	bw.WriteString("];\nvar rmV4 = [")
	writePrefixes(bw, &v4, func(k [16]byte, bits int) string {
		a := netip.AddrFrom16(k).Unmap().As4()
		n := uint64(a[0])<<24 | uint64(a[1])<<16 | uint64(a[2])<<8 | uint64(a[3])
		return strconv.FormatUint(n>>(32-bits), 10)
	})
	bw.WriteString("];\nvar rmV6 = [")
	writePrefixes(bw, &v6, func(k [16]byte, _ int) string { return hex.EncodeToString(k[:]) })
	bw.WriteString("];\n")
	bw.WriteString(pacFunctions)
	return bw.Flush()
}

func sep(w *bufio.Writer, i int) {
	if i > 0 {
		w.WriteString(",")
	}
}

// jsString is s as a JavaScript string literal (JSON's is one).
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func writeStringMap(w *bufio.Writer, m map[string]int32) {
	i := 0
	for k, idx := range m {
		sep(w, i)
		fmt.Fprintf(w, "%s,%d", jsString(k), idx)
		i++
	}
}

// writePrefixes writes t as [bits, rmMap([key, rule, ...]), ...], each
// key as the PAC functions compute it from an address (key).
func writePrefixes(w *bufio.Writer, t *prefixTable, key func(k [16]byte, bits int) string) {
	for i, bits := range t.lens {
		sep(w, i)
		fmt.Fprintf(w, "%d,rmMap([", bits)
		j := 0
		for k, idx := range t.byLn[bits] {
			sep(w, j)
			fmt.Fprintf(w, "%s,%d", jsString(key(k, bits)), idx)
			j++
		}
		w.WriteString("])")
	}
}

func (t *prefixTable) clone() prefixTable {
	c := prefixTable{lens: append([]int(nil), t.lens...), byLn: map[int]map[[16]byte]int32{}}
	for bits, m := range t.byLn {
		cm := make(map[[16]byte]int32, len(m))
		for k, v := range m {
			cm[k] = v
		}
		c.byLn[bits] = cm
	}
	return c
}

// pacFunctions are Match in JavaScript (ES5, as PAC engines run it), over
// the tables WritePAC writes before them. rmMap builds a map without a
// prototype: a name such as "__proto__" or "constructor" is a key like
// any other.
const pacFunctions = `function rmMap(a) {
  var m = Object.create(null);
  for (var i = 0; i < a.length; i += 2) m[a[i]] = a[i + 1];
  return m;
}
function rmIn(m, k, best) {
  var v = m[k];
  return v !== undefined && v < best ? v : best;
}
function rmPort(url) {
  var m = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\/(?:[^\/?#@]*@)?(\[[^\]]*\]|[^\/?#:]*)(?::(\d+))?/.exec(url);
  if (!m) return 0;
  if (m[3]) return parseInt(m[3], 10);
  var s = m[1].toLowerCase();
  return s == "https" || s == "wss" ? 443 : s == "ftp" ? 21 : 80;
}
function rmQuad(h) {
  var m = /^(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})\.(0|[1-9]\d{0,2})$/.exec(h);
  if (!m) return -1;
  var n = 0;
  for (var i = 1; i <= 4; i++) {
    var b = parseInt(m[i], 10);
    if (b > 255) return -1;
    n = n * 256 + b;
  }
  return n;
}
function rmGroups6(h) {
  var z = h.indexOf("%");
  if (z >= 0) h = h.substring(0, z);
  var q = /^(.*:)([^:]*\.[^:]*)$/.exec(h);
  if (q) {
    var n = rmQuad(q[2]);
    if (n < 0) return null;
    h = q[1] + Math.floor(n / 65536).toString(16) + ":" + (n % 65536).toString(16);
  }
  var parts = h.split("::");
  if (parts.length > 2) return null;
  var head = parts[0] ? parts[0].split(":") : [];
  var tail = parts.length == 2 && parts[1] ? parts[1].split(":") : [];
  var n6 = head.length + tail.length;
  if (parts.length == 1 ? n6 != 8 : n6 > 7) return null;
  var g = head.slice(0);
  for (var i = n6; i < 8; i++) g.push("0");
  g = g.concat(tail);
  for (var j = 0; j < 8; j++) {
    if (!/^[0-9a-f]{1,4}$/.test(g[j])) return null;
    g[j] = parseInt(g[j], 16);
  }
  return g;
}
function rmV4In(n, best) {
  for (var i = 0; i < rmV4.length; i += 2) {
    best = rmIn(rmV4[i + 1], String(Math.floor(n / Math.pow(2, 32 - rmV4[i]))), best);
  }
  return best;
}
function rmV6In(g, best) {
  for (var i = 0; i < rmV6.length; i += 2) {
    var bits = rmV6[i], k = "";
    for (var j = 0; j < 8; j++) {
      var b = Math.max(0, Math.min(16, bits - 16 * j));
      var x = (g[j] - g[j] % Math.pow(2, 16 - b)).toString(16);
      while (x.length < 4) x = "0" + x;
      k += x;
    }
    best = rmIn(rmV6[i + 1], k, best);
  }
  return best;
}
function rmName(h, best) {
  best = rmIn(rmExact, h, best);
  for (var rest = h; rest != "";) {
    best = rmIn(rmSuffix, rest, best);
    var dot = rest.indexOf(".");
    if (dot < 0) break;
    rest = rest.substring(dot + 1);
  }
  for (var i = 0; i < rmKeywords.length; i += 2) {
    if (rmKeywords[i + 1] >= best) break;
    if (h.indexOf(rmKeywords[i]) >= 0) return rmKeywords[i + 1];
  }
  return best;
}
function rmPortIn(port, best) {
  for (var i = 0; i < rmPorts.length; i++) {
    var p = rmPorts[i];
    if (p[0] >= best) break;
    for (var j = 1; j < p.length; j += 2) {
      if (port >= p[j] && port <= p[j + 1]) return p[0];
    }
  }
  return best;
}
function relaymeshAction(url, host) {
  var best = rmAll;
  var h = host;
  if (h.charAt(0) == "[" && h.charAt(h.length - 1) == "]") h = h.substring(1, h.length - 1);
  var n = rmQuad(h), g = n < 0 && h.indexOf(":") >= 0 ? rmGroups6(h.toLowerCase()) : null;
  if (g && g[0] == 0 && g[1] == 0 && g[2] == 0 && g[3] == 0 && g[4] == 0 && g[5] == 65535) n = g[6] * 65536 + g[7];
  if (n >= 0) best = rmV4In(n, best);
  else if (g) best = rmV6In(g, best);
  else {
    h = h.toLowerCase();
    if (h.charAt(h.length - 1) == ".") h = h.substring(0, h.length - 1);
    best = rmName(h, best);
  }
  var port = rmPort(url);
  if (port > 0 && port < 65536) best = rmPortIn(port, best);
  return best == rmNone ? "P" : rmAct.charAt(best);
}
`
