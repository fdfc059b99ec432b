package planner

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// maxNameBytes bounds a node name: names go into diagrams and tables.
	maxNameBytes = 64
	// minRTTMs and maxRTTMs bound an RTT, milliseconds: 1 µs to an hour.
	// Within them every rate the model computes is finite, as JSON needs.
	minRTTMs = 0.001
	maxRTTMs = 3600e3
)

// ParseMatrix decodes a matrix file (format in the package documentation)
// strictly: unknown fields, duplicate keys, duplicate pairs, pairs naming
// unknown nodes and impossible numbers are errors that name the entry.
// Nodes come out sorted by name, pairs in file order.
func ParseMatrix(data []byte) (*Matrix, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var m Matrix
	sawNodes := false
	err := eachField(dec, func(key string) error {
		switch key {
		case "nodes":
			sawNodes = true
			err := eachField(dec, func(name string) error {
				n, err := parseNode(dec, name)
				if err != nil {
					return fmt.Errorf("node %q: %w", name, err)
				}
				m.Nodes = append(m.Nodes, n)
				return nil
			})
			if err != nil {
				return fmt.Errorf("nodes: %w", err)
			}
			return nil
		case "rtt_ms":
			return parsePairs(dec, &m)
		default:
			return fmt.Errorf("unknown field %q (want nodes, rtt_ms)", key)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("matrix: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("matrix: data after the matrix object")
	}
	if !sawNodes {
		return nil, errors.New("matrix: nodes: missing")
	}
	slices.SortFunc(m.Nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("matrix: %w", err)
	}
	return &m, nil
}

// UnmarshalJSON is ParseMatrix, so a Matrix inside another JSON document is
// decoded as strictly as a matrix file.
func (m *Matrix) UnmarshalJSON(data []byte) error {
	p, err := ParseMatrix(data)
	if err != nil {
		return err
	}
	*m = *p
	return nil
}

// fileNode is a node's value in the file: Node without its name, which is
// the node's key in "nodes". The outer Name, shallower than Node's, hides
// Node's "name" from encoding/json, and being nil is left out; every other
// key is Node's own, so a field added to Node is written with no edit here.
type fileNode struct {
	Node
	Name *struct{} `json:"name,omitempty"`
}

// nodeKeys maps each key of a node's object in the file to its field of
// Node (the index), and nodeKeyList lists them in Node's order: every
// field but Name, by its JSON name. They are made from Node's tags, so
// that a model input added to Node, with its tag, is read (parseNode) as
// it is written (fileNode) with no edit here.
var nodeKeys, nodeKeyList = nodeFields()

func nodeFields() (map[string]int, []string) {
	keys := map[string]int{}
	var list []string
	t := reflect.TypeFor[Node]()
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Name == "Name" || key == "-" || !f.IsExported() {
			continue
		}
		if key == "" { // encoding/json's name for an untagged field
			key = f.Name
		}
		keys[key] = i
		list = append(list, key)
	}
	return keys, list
}

// filePair is the object form of an rtt_ms entry.
type filePair struct {
	A         string  `json:"a"`
	B         string  `json:"b"`
	RTTMs     float64 `json:"rtt_ms"`
	Loss      float64 `json:"loss,omitempty"`
	Estimated bool    `json:"estimated,omitempty"`
	AgeSec    float64 `json:"age_s,omitempty"`
	// AWindowBytes and BWindowBytes are Pair's.
	AWindowBytes int64 `json:"a_window_bytes,omitempty"`
	BWindowBytes int64 `json:"b_window_bytes,omitempty"`
	// ASendBps, BSendBps and their ages are Pair's.
	ASendBps    float64 `json:"a_send_bps,omitempty"`
	BSendBps    float64 `json:"b_send_bps,omitempty"`
	ASendAgeSec float64 `json:"a_send_age_s,omitempty"`
	BSendAgeSec float64 `json:"b_send_age_s,omitempty"`
	ASendSource string  `json:"a_send_source,omitempty"`
	BSendSource string  `json:"b_send_source,omitempty"`
	ALossSource string  `json:"a_loss_source,omitempty"`
	BLossSource string  `json:"b_loss_source,omitempty"`
}

// MarshalJSON writes the file format ParseMatrix reads: pairs with only an
// RTT as [a, b, rtt_ms] triples, the others as objects.
func (m Matrix) MarshalJSON() ([]byte, error) {
	nodes := make(map[string]fileNode, len(m.Nodes))
	for _, n := range m.Nodes {
		nodes[n.Name] = fileNode{Node: n}
	}
	pairs := make([]any, len(m.Pairs))
	for i, p := range m.Pairs {
		if !p.hasExtras() && !p.Estimated && p.AgeSec == 0 && p.ALossSource == "" && p.BLossSource == "" {
			pairs[i] = []any{p.A, p.B, p.RTTMs}
		} else {
			pairs[i] = filePair(p)
		}
	}
	return json.Marshal(struct {
		Nodes map[string]fileNode `json:"nodes"`
		Pairs []any               `json:"rtt_ms"`
	}{nodes, pairs})
}

// eachField reads one JSON object from dec, calling field for every key
// with dec positioned at its value, which field must consume. Duplicate
// keys are errors: encoding/json would silently keep the last.
func eachField(dec *json.Decoder, field func(key string) error) error {
	tok, err := token(dec)
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return fmt.Errorf("want an object, got %s", describeToken(tok))
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := token(dec)
		if err != nil {
			return err
		}
		key := tok.(string) // inside an object the decoder only yields string keys
		if seen[key] {
			return fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		if err := field(key); err != nil {
			return err
		}
	}
	_, err = token(dec) // the closing '}'
	return err
}

// token is dec.Token where the end of the input is always unexpected.
func token(dec *json.Decoder) (json.Token, error) {
	tok, err := dec.Token()
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return tok, err
}

// describeToken names a JSON token for an error message.
func describeToken(tok json.Token) string {
	switch t := tok.(type) {
	case nil:
		return "null"
	case json.Delim:
		if t == '[' {
			return "an array"
		}
		return string(t)
	case string:
		return "a string"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}

// parseNode reads the node called name: an object of Node's keys
// (nodeKeys), each decoded into its field.
func parseNode(dec *json.Decoder, name string) (Node, error) {
	n := Node{Name: name}
	v := reflect.ValueOf(&n).Elem()
	err := eachField(dec, func(key string) error {
		i, ok := nodeKeys[key]
		if !ok {
			return fmt.Errorf("unknown field %q (want %s)", key, strings.Join(nodeKeyList, ", "))
		}
		if err := dec.Decode(v.Field(i).Addr().Interface()); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		return nil
	})
	return n, err
}

// parsePairs reads the rtt_ms array: each entry a [a, b, rtt_ms] triple or
// an object with a, b, rtt_ms and optional loss, estimated, age_s.
func parsePairs(dec *json.Decoder, m *Matrix) error {
	tok, err := token(dec)
	if err != nil {
		return fmt.Errorf("rtt_ms: %w", err)
	}
	if tok != json.Delim('[') {
		return fmt.Errorf("rtt_ms: want an array, got %s", describeToken(tok))
	}
	for i := 0; dec.More(); i++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("rtt_ms[%d]: %w", i, err)
		}
		p, err := parsePair(raw)
		if err != nil {
			return fmt.Errorf("rtt_ms[%d]: %w", i, err)
		}
		m.Pairs = append(m.Pairs, p)
	}
	_, err = token(dec) // the closing ']'
	return err
}

func parsePair(raw json.RawMessage) (Pair, error) {
	var p Pair
	switch raw[0] { // the decoder hands over a value without leading space
	case '[':
		var triple []json.RawMessage
		if err := json.Unmarshal(raw, &triple); err != nil {
			return p, err
		}
		if len(triple) != 3 {
			return p, fmt.Errorf("want [a, b, rtt_ms], got %d elements", len(triple))
		}
		for i, dst := range []any{&p.A, &p.B, &p.RTTMs} {
			if err := json.Unmarshal(triple[i], dst); err != nil {
				return p, fmt.Errorf("element %d: %w", i, err)
			}
		}
		return p, nil
	case '{':
		dec := json.NewDecoder(bytes.NewReader(raw))
		sawRTT := false
		err := eachField(dec, func(key string) error {
			var err error
			switch key {
			case "a":
				err = dec.Decode(&p.A)
			case "b":
				err = dec.Decode(&p.B)
			case "rtt_ms":
				sawRTT = true
				err = dec.Decode(&p.RTTMs)
			case "loss":
				err = dec.Decode(&p.Loss)
			case "estimated":
				err = dec.Decode(&p.Estimated)
			case "age_s":
				err = dec.Decode(&p.AgeSec)
			case "a_window_bytes":
				err = dec.Decode(&p.AWindowBytes)
			case "b_window_bytes":
				err = dec.Decode(&p.BWindowBytes)
			case "a_send_bps":
				err = dec.Decode(&p.ASendBps)
			case "b_send_bps":
				err = dec.Decode(&p.BSendBps)
			case "a_send_age_s":
				err = dec.Decode(&p.ASendAgeSec)
			case "b_send_age_s":
				err = dec.Decode(&p.BSendAgeSec)
			case "a_send_source":
				err = dec.Decode(&p.ASendSource)
			case "b_send_source":
				err = dec.Decode(&p.BSendSource)
			case "a_loss_source":
				err = dec.Decode(&p.ALossSource)
			case "b_loss_source":
				err = dec.Decode(&p.BLossSource)
			default:
				return fmt.Errorf("unknown field %q (want a, b, rtt_ms, loss, a_loss_source, b_loss_source, estimated, age_s, a_window_bytes, b_window_bytes, a_send_bps, b_send_bps, a_send_age_s, b_send_age_s, a_send_source, b_send_source)", key)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			return nil
		})
		if err == nil && !sawRTT {
			err = errors.New("rtt_ms: missing")
		}
		return p, err
	default:
		return p, errors.New("want [a, b, rtt_ms] or an object")
	}
}

// Validate checks what ParseMatrix checks, for a Matrix built in Go: node
// names unique and printable, numbers possible, every pair between two
// different known nodes and listed once (either way round). Errors name
// the node or the pair (by its index in Pairs, as rtt_ms[i]).
func (m *Matrix) Validate() error {
	idx, err := m.index()
	if err != nil {
		return err
	}
	return m.walkPairs(idx, nil)
}

// index validates the nodes and maps each name to its index in Nodes.
func (m *Matrix) index() (map[string]int, error) {
	if len(m.Nodes) > MaxNodes {
		return nil, fmt.Errorf("%d nodes: at most %d", len(m.Nodes), MaxNodes)
	}
	idx := make(map[string]int, len(m.Nodes))
	for i, n := range m.Nodes {
		if err := checkNode(n); err != nil {
			return nil, fmt.Errorf("node %q: %w", n.Name, err)
		}
		if _, dup := idx[n.Name]; dup {
			return nil, fmt.Errorf("node %q: duplicate name", n.Name)
		}
		idx[n.Name] = i
	}
	return idx, nil
}

// checkName accepts what diagrams and tables can show on one line.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case len(name) > maxNameBytes:
		return fmt.Errorf("name longer than %d bytes", maxNameBytes)
	case !utf8.ValidString(name):
		return errors.New("name is not UTF-8")
	case strings.ContainsFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return errors.New("name contains space or control characters")
	}
	return nil
}

// walkPairs validates every pair and, when visit is not nil, calls it with
// the pair's index in Pairs and the indices in Nodes of its two ends.
func (m *Matrix) walkPairs(idx map[string]int, visit func(k, a, b int)) error {
	n := len(m.Nodes)
	seen := make([]uint64, (n*n+63)/64) // bit lo*n+hi: the unordered pair {lo, hi} was listed
	lookup := func(name string) (int, error) {
		i, ok := idx[name]
		if !ok {
			if name == "" {
				return 0, errors.New("missing node name")
			}
			return 0, fmt.Errorf("unknown node %q", name)
		}
		return i, nil
	}
	// Pairs usually come sorted (a registry sorts by from, then to): the
	// same A as the pair before, and the B after the one before. Checking
	// those guesses first saves most map lookups, the bulk of the cost of
	// a full matrix.
	ia, ib := -1, -1
	for k := range m.Pairs {
		p := &m.Pairs[k]
		var err error
		if ia < 0 || p.A != m.Nodes[ia].Name {
			if ia, err = lookup(p.A); err != nil {
				return pairError(k, p, err)
			}
		}
		if ib++; ib <= 0 || ib >= n || p.B != m.Nodes[ib].Name {
			if ib, err = lookup(p.B); err != nil {
				return pairError(k, p, err)
			}
		}
		if err := checkPair(p, ia, ib); err != nil {
			return pairError(k, p, err)
		}
		bit := min(ia, ib)*n + max(ia, ib)
		if seen[bit/64]&(1<<(bit%64)) != 0 {
			return pairError(k, p, errors.New("duplicate: this pair (either way round) is already listed"))
		}
		seen[bit/64] |= 1 << (bit % 64)
		if visit != nil {
			visit(k, ia, ib)
		}
	}
	return nil
}

func checkPair(p *Pair, ia, ib int) error {
	switch {
	case ia == ib:
		return errors.New("a pair needs two different nodes")
	case !(p.RTTMs >= minRTTMs && p.RTTMs <= maxRTTMs):
		return fmt.Errorf("rtt_ms %v: want milliseconds from %v to %v", p.RTTMs, minRTTMs, maxRTTMs)
	case !(p.Loss >= 0 && p.Loss <= 1):
		return fmt.Errorf("loss %v: want a fraction 0..1", p.Loss)
	case !(p.AgeSec >= 0) || math.IsInf(p.AgeSec, 0):
		return fmt.Errorf("age_s %v: want seconds >= 0", p.AgeSec)
	case p.AWindowBytes < 0 || p.BWindowBytes < 0:
		return fmt.Errorf("a_window_bytes %d, b_window_bytes %d: want bytes >= 0 (0 = the node's)", p.AWindowBytes, p.BWindowBytes)
	case !(p.ASendBps >= 0) || math.IsInf(p.ASendBps, 0) || !(p.BSendBps >= 0) || math.IsInf(p.BSendBps, 0):
		return fmt.Errorf("a_send_bps %v, b_send_bps %v: want bits/s >= 0 (0 = unknown)", p.ASendBps, p.BSendBps)
	case !(p.ASendAgeSec >= 0) || math.IsInf(p.ASendAgeSec, 0) || !(p.BSendAgeSec >= 0) || math.IsInf(p.BSendAgeSec, 0):
		return fmt.Errorf("a_send_age_s %v, b_send_age_s %v: want seconds >= 0", p.ASendAgeSec, p.BSendAgeSec)
	case !knownSource(p.ASendSource) || !knownSource(p.BSendSource):
		return fmt.Errorf("a_send_source %q, b_send_source %q: want %q, %q, %q or %q (or none)", p.ASendSource, p.BSendSource, LearntFromTunnels, LearntFromBench, LearntFromProbe, LearntByReceiver)
	case !knownLossSource(p.ALossSource) || !knownLossSource(p.BLossSource):
		return fmt.Errorf("a_loss_source %q, b_loss_source %q: want %q, %q or %q (or none: the probes')", p.ALossSource, p.BLossSource, LearntFromTunnels, LearntFromBench, LossDeclared)
	}
	return nil
}

func pairError(k int, p *Pair, err error) error {
	return fmt.Errorf("rtt_ms[%d] (%q, %q): %w", k, p.A, p.B, err)
}

// RelaysAmong returns the names that are relays of m, in m's order: what a
// caller may put in Constraints.Exclude from a list that can name relays
// the matrix no longer holds (Search refuses unknown names).
func (m *Matrix) RelaysAmong(names []string) []string {
	var out []string
	for _, n := range m.Nodes {
		if n.Relay && slices.Contains(names, n.Name) {
			out = append(out, n.Name)
		}
	}
	return out
}

// Resolve returns the name of the node dst means: the node called dst, or
// else the one node whose region is dst (compared case-insensitively).
// When a region holds several nodes it is an error listing them: which one
// is meant (a relay there, a server there) is the caller's to say, by name.
func (m *Matrix) Resolve(dst string) (string, error) {
	var inRegion, regions []string
	for _, n := range m.Nodes {
		if n.Name == dst {
			return n.Name, nil
		}
		if n.Region == "" {
			continue
		}
		if strings.EqualFold(n.Region, dst) {
			inRegion = append(inRegion, n.Name)
		}
		regions = append(regions, n.Region)
	}
	switch len(inRegion) {
	case 1:
		return inRegion[0], nil
	case 0:
		slices.Sort(regions)
		return "", fmt.Errorf("destination %q: no node or region of that name (regions: %s)",
			dst, cmp.Or(strings.Join(slices.Compact(regions), ", "), "none"))
	}
	slices.Sort(inRegion)
	return "", fmt.Errorf("destination %q: region has %d nodes (%s): name one", dst, len(inRegion), strings.Join(inRegion, ", "))
}

// knownSource reports whether s names who learnt a rate (or is empty).
func knownSource(s string) bool {
	return s == "" || s == LearntFromTunnels || s == LearntFromBench || s == LearntFromProbe || s == LearntByReceiver
}

// knownLossSource reports whether s names who measured a loss (or is
// empty); a capacity probe measures none.
func knownLossSource(s string) bool {
	return s == "" || s == LearntFromTunnels || s == LearntFromBench || s == LossDeclared
}

// Sanitize drops from m what Validate would refuse, so that one bad entry
// from a registry (a relay's name with a space, a negative window, a NaN
// capacity, a pair naming an unknown node) costs that entry, not every
// plan: nodes that fail the checks (unless named in keep, which Search
// then refuses by name), later duplicates of a name, pairs that fail the
// checks or name a dropped node, and later duplicates of a pair. It
// returns a note per entry dropped, naming it and why.
func Sanitize(m *Matrix, keep ...string) []string {
	var notes []string
	idx := make(map[string]int, len(m.Nodes))
	nodes := m.Nodes[:0:0]
	for _, n := range m.Nodes {
		err := checkNode(n)
		if _, dup := idx[n.Name]; dup && err == nil {
			err = errors.New("duplicate name")
		}
		if err != nil && !slices.Contains(keep, n.Name) {
			notes = append(notes, fmt.Sprintf("node %q left out: %v", n.Name, err))
			continue
		}
		idx[n.Name] = len(nodes)
		nodes = append(nodes, n)
	}
	m.Nodes = nodes
	seen := make(map[[2]int]bool, len(m.Pairs))
	pairs := m.Pairs[:0:0]
	for k, p := range m.Pairs {
		ia, okA := idx[p.A]
		ib, okB := idx[p.B]
		var err error
		switch {
		case !okA || !okB:
			err = errors.New("names a node not in the matrix (or left out)")
		default:
			err = checkPair(&p, ia, ib)
		}
		key := [2]int{min(ia, ib), max(ia, ib)}
		if err == nil && seen[key] {
			err = errors.New("duplicate pair")
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("pair rtt_ms[%d] (%q, %q) left out: %v", k, p.A, p.B, err))
			continue
		}
		seen[key] = true
		pairs = append(pairs, p)
	}
	m.Pairs = pairs
	return notes
}
