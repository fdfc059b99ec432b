package planner

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const exampleMatrix = `{"nodes": {"client": {"window_bytes": 65536}, "r1": {"relay": true, "window_bytes": 4194304}, "srv": {"region": "tokyo"}}, "rtt_ms": [["client", "r1", 12.5], ["r1", "srv", 30.1], ["client", "srv", 50.0]]}`

func TestParseMatrix(t *testing.T) {
	m, err := ParseMatrix([]byte(exampleMatrix))
	if err != nil {
		t.Fatal(err)
	}
	want := &Matrix{
		Nodes: []Node{
			{Name: "client", WindowBytes: 65536},
			{Name: "r1", Relay: true, WindowBytes: 4194304},
			{Name: "srv", Region: "tokyo"},
		},
		Pairs: []Pair{
			{A: "client", B: "r1", RTTMs: 12.5},
			{A: "r1", B: "srv", RTTMs: 30.1},
			{A: "client", B: "srv", RTTMs: 50},
		},
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %+v\nwant %+v", m, want)
	}

	// Every optional field, pair objects beside triples, spacing.
	m, err = ParseMatrix([]byte(`
	{
	  "rtt_ms": [
	    { "a": "r1", "b": "srv", "rtt_ms": 30.1, "loss": 0.01, "estimated": true, "age_s": 12, "a_window_bytes": 100000, "b_window_bytes": 200000 },
	    [ "client" , "r1" , 12.5 ]
	  ],
	  "nodes": {
	    "srv": {},
	    "r1": {"relay": true, "region": "osaka", "window_bytes": 4194304, "send_window_bytes": 4063232, "limit_bps": 1e9, "congestion_control": "bbr"},
	    "client": {"relay": false}
	  }
	}`))
	if err != nil {
		t.Fatal(err)
	}
	want = &Matrix{
		Nodes: []Node{{Name: "client"}, {Name: "r1", Relay: true, Region: "osaka", WindowBytes: 4194304, SendWindowBytes: 4063232, LimitBps: 1e9, CongestionControl: "bbr"}, {Name: "srv"}},
		Pairs: []Pair{{A: "r1", B: "srv", RTTMs: 30.1, Loss: 0.01, Estimated: true, AgeSec: 12, AWindowBytes: 100000, BWindowBytes: 200000}, {A: "client", B: "r1", RTTMs: 12.5}},
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %+v\nwant %+v", m, want)
	}

	// A matrix with nothing measured is valid.
	if _, err := ParseMatrix([]byte(`{"nodes": {"a": {}}}`)); err != nil {
		t.Fatal(err)
	}
}

func TestParseMatrixErrors(t *testing.T) {
	nodes := `"nodes": {"client": {}, "r1": {"relay": true}, "srv": {}}`
	for _, tc := range []struct {
		name, in, err string
	}{
		// encoding/json's words for a truncated document differ between
		// Go releases ("unexpected EOF", "unexpected end of JSON input").
		{"not json", `{`, "matrix: unexpected "},
		{"not an object", `[]`, "matrix: want an object, got an array"},
		{"null", `null`, "matrix: want an object, got null"},
		{"trailing data", `{"nodes": {"a": {}}} {}`, "data after the matrix object"},
		{"no nodes", `{"rtt_ms": []}`, "matrix: nodes: missing"},
		{"unknown field", `{"nodes": {}, "rtt": []}`, `unknown field "rtt" (want nodes, rtt_ms)`},
		{"duplicate key", `{"nodes": {}, "nodes": {}}`, `duplicate key "nodes"`},
		{"nodes not an object", `{"nodes": ["a"]}`, "nodes: want an object, got an array"},
		{"duplicate node", `{"nodes": {"a": {}, "a": {"relay": true}}}`, `nodes: duplicate key "a"`},
		{"node null", `{"nodes": {"a": null}}`, `node "a": want an object, got null`},
		{"unknown node field", `{"nodes": {"a": {"window": 1}}}`, `node "a": unknown field "window"`},
		{"duplicate node field", `{"nodes": {"a": {"relay": true, "relay": false}}}`, `node "a": duplicate key "relay"`},
		{"window type", `{"nodes": {"a": {"window_bytes": 1.5}}}`, `node "a": window_bytes: json: cannot unmarshal number 1.5`},
		{"negative window", `{"nodes": {"a": {"window_bytes": -1}}}`, `node "a": window_bytes -1: want bytes >= 0`},
		{"negative send window", `{"nodes": {"a": {"send_window_bytes": -1}}}`, `node "a": send_window_bytes -1: want bytes >= 0`},
		{"negative limit", `{"nodes": {"a": {"limit_bps": -5}}}`, `node "a": limit_bps -5: want bits/s >= 0`},
		{"negative max_stripes", `{"nodes": {"a": {"relay": true, "max_stripes": -1}}}`, `node "a": max_stripes -1: want connections >= 0`},
		{"max_stripes type", `{"nodes": {"a": {"max_stripes": 2.5}}}`, `node "a": max_stripes: json: cannot unmarshal number 2.5`},
		{"huge number", `{"nodes": {"a": {"limit_bps": 1e999}}}`, `node "a": limit_bps: json: cannot unmarshal number 1e999`},
		{"relay type", `{"nodes": {"a": {"relay": "yes"}}}`, `node "a": relay: json: cannot unmarshal string`},
		{"empty name", `{"nodes": {"": {}}}`, `node "": empty name`},
		{"name with space", `{"nodes": {"a b": {}}}`, `node "a b": name contains space`},
		{"long name", `{"nodes": {"` + strings.Repeat("x", 65) + `": {}}}`, "name longer than 64 bytes"},
		{"region control", `{"nodes": {"a": {"region": "to\u0007kyo"}}}`, `region "to\akyo": want printable text`},
		{"rtt_ms not array", `{` + nodes + `, "rtt_ms": {}}`, "rtt_ms: want an array, got {"},
		{"short triple", `{` + nodes + `, "rtt_ms": [["client", "r1"]]}`, "rtt_ms[0]: want [a, b, rtt_ms], got 2 elements"},
		{"triple type", `{` + nodes + `, "rtt_ms": [["client", "r1", "12"]]}`, "rtt_ms[0]: element 2: json: cannot unmarshal string"},
		{"entry type", `{` + nodes + `, "rtt_ms": [12]}`, "rtt_ms[0]: want [a, b, rtt_ms] or an object"},
		{"unknown node in pair", `{` + nodes + `, "rtt_ms": [["client", "r1", 10], ["r1", "tokyo", 5]]}`, `rtt_ms[1] ("r1", "tokyo"): unknown node "tokyo"`},
		{"missing name", `{` + nodes + `, "rtt_ms": [{"a": "r1", "rtt_ms": 5}]}`, `rtt_ms[0] ("r1", ""): missing node name`},
		{"self pair", `{` + nodes + `, "rtt_ms": [["r1", "r1", 5]]}`, `rtt_ms[0] ("r1", "r1"): a pair needs two different nodes`},
		{"duplicate pair", `{` + nodes + `, "rtt_ms": [["client", "r1", 10], ["srv", "r1", 5], ["client", "r1", 11]]}`, `rtt_ms[2] ("client", "r1"): duplicate`},
		{"duplicate reversed", `{` + nodes + `, "rtt_ms": [["client", "r1", 10], ["r1", "client", 10]]}`, `rtt_ms[1] ("r1", "client"): duplicate`},
		{"negative rtt", `{` + nodes + `, "rtt_ms": [["client", "r1", -1]]}`, `rtt_ms[0] ("client", "r1"): rtt_ms -1: want milliseconds from 0.001 to 3.6e+06`},
		{"zero rtt", `{` + nodes + `, "rtt_ms": [["client", "r1", 0]]}`, "rtt_ms 0: want milliseconds from"},
		{"NaN rtt", `{` + nodes + `, "rtt_ms": [["client", "r1", NaN]]}`, "rtt_ms[0]: invalid character 'N'"},
		{"no rtt", `{` + nodes + `, "rtt_ms": [{"a": "client", "b": "r1"}]}`, "rtt_ms[0]: rtt_ms: missing"},
		{"loss", `{` + nodes + `, "rtt_ms": [{"a": "client", "b": "r1", "rtt_ms": 5, "loss": 1.5}]}`, "loss 1.5: want a fraction 0..1"},
		{"age", `{` + nodes + `, "rtt_ms": [{"a": "client", "b": "r1", "rtt_ms": 5, "age_s": -3}]}`, "age_s -3: want seconds >= 0"},
		{"unknown pair field", `{` + nodes + `, "rtt_ms": [{"a": "client", "b": "r1", "rtt": 5}]}`, `rtt_ms[0]: unknown field "rtt"`},
		{"estimated type", `{` + nodes + `, "rtt_ms": [{"a": "client", "b": "r1", "rtt_ms": 5, "estimated": 1}]}`, "rtt_ms[0]: estimated: json: cannot unmarshal number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseMatrix([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %+v, error %v; want error containing %q", m, err, tc.err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Matrix{Nodes: []Node{{Name: "a"}, {Name: "b"}}, Pairs: []Pair{{A: "a", B: "b", RTTMs: 1}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		m    Matrix
		err  string
	}{
		{"duplicate name", Matrix{Nodes: []Node{{Name: "a"}, {Name: "a"}}}, `node "a": duplicate name`},
		{"bad utf-8", Matrix{Nodes: []Node{{Name: "a\xff"}}}, "name is not UTF-8"},
		{"too many", Matrix{Nodes: make([]Node, MaxNodes+1)}, "10001 nodes: at most 10000"},
		{"infinite rtt", Matrix{Nodes: ok.Nodes, Pairs: []Pair{{A: "a", B: "b", RTTMs: math.Inf(1)}}}, "rtt_ms +Inf"},
		{"tiny rtt", Matrix{Nodes: ok.Nodes, Pairs: []Pair{{A: "a", B: "b", RTTMs: 1e-9}}}, "rtt_ms 1e-09"},
		{"NaN loss", Matrix{Nodes: ok.Nodes, Pairs: []Pair{{A: "a", B: "b", RTTMs: 1, Loss: math.NaN()}}}, "loss NaN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.m.Validate(); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
		})
	}
}

// MarshalJSON writes what ParseMatrix reads, and json.Unmarshal of a
// Matrix is ParseMatrix.
func TestMatrixRoundTrip(t *testing.T) {
	m := &Matrix{
		Nodes: []Node{{Name: "client", WindowBytes: 65536, SendWindowBytes: 32768, LimitBps: 5e7, CongestionControl: "cubic"}, {Name: "r1", Relay: true, Region: "osaka"}, {Name: "srv"}},
		Pairs: []Pair{{A: "client", B: "r1", RTTMs: 12.5, AWindowBytes: 40000}, {A: "srv", B: "r1", RTTMs: 30.1, Loss: 0.02, Estimated: true, AgeSec: 7}},
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"nodes":{"client":{"window_bytes":65536,"send_window_bytes":32768,"limit_bps":50000000,"congestion_control":"cubic"},"r1":{"relay":true,"region":"osaka"},"srv":{}},` +
		`"rtt_ms":[{"a":"client","b":"r1","rtt_ms":12.5,"a_window_bytes":40000},{"a":"srv","b":"r1","rtt_ms":30.1,"loss":0.02,"estimated":true,"age_s":7}]}`
	if string(data) != want {
		t.Fatalf("marshal:\n%s\nwant\n%s", data, want)
	}
	var back struct{ Matrix Matrix }
	if err := json.Unmarshal([]byte(`{"Matrix": `+string(data)+`}`), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back.Matrix, m) {
		t.Fatalf("round trip: %+v, want %+v", back.Matrix, m)
	}
	if err := json.Unmarshal([]byte(`{"Matrix": {"nodes": {}, "x": 1}}`), &back); err == nil {
		t.Fatal("Unmarshal accepted an unknown field")
	}
}

// A node's keys in the file are Node's tags: every field but Name has one
// with omitempty (absent = zero), the unknown-field error lists them in
// Node's order, and each is written and read back by the same key.
func TestNodeKeysAreNodesTags(t *testing.T) {
	var keys, fields []string
	for f := range reflect.TypeFor[Node]().Fields() {
		if f.Name == "Name" {
			continue
		}
		key, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if key == "" || key == "-" || opts != "omitempty" {
			t.Errorf("Node.%s: tag %q, want json:\"key,omitempty\"", f.Name, f.Tag.Get("json"))
		}
		keys, fields = append(keys, key), append(fields, f.Name)
	}
	if !slices.Equal(nodeKeyList, keys) {
		t.Fatalf("node keys %q, want Node's tags %q", nodeKeyList, keys)
	}
	_, err := ParseMatrix([]byte(`{"nodes": {"a": {"window": 1}}}`))
	if want := `matrix: nodes: node "a": unknown field "window" (want ` + strings.Join(keys, ", ") + ")"; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
	for i, key := range keys {
		n := Node{Name: "a"}
		switch f := reflect.ValueOf(&n).Elem().FieldByName(fields[i]); f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(2)
		case reflect.Float64:
			f.SetFloat(2.5)
		case reflect.String:
			f.SetString("bbr")
		default:
			t.Fatalf("Node.%s: a %v, which this test does not set", fields[i], f.Kind())
		}
		data, err := json.Marshal(fileNode{Node: n})
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"` + key + `":`; !strings.HasPrefix(string(data), want) {
			t.Errorf("Node.%s written as %s, want %s...}", fields[i], data, want)
		}
		back, err := parseNode(json.NewDecoder(bytes.NewReader(data)), "a")
		if err != nil || back != n {
			t.Errorf("%s read back as %+v (%v), want %+v", data, back, err, n)
		}
	}
}

func TestResolve(t *testing.T) {
	m := &Matrix{Nodes: []Node{
		{Name: "osaka", Region: "kansai"}, // a name wins over a region
		{Name: "r-tokyo", Relay: true, Region: "tokyo"},
		{Name: "srv", Region: "Singapore"},
		{Name: "r-kansai", Relay: true, Region: "kansai"},
		{Name: "x", Region: "kansai"},
	}}
	for _, tc := range []struct{ dst, want, err string }{
		{dst: "srv", want: "srv"},
		{dst: "osaka", want: "osaka"},
		{dst: "tokyo", want: "r-tokyo"},
		{dst: "singapore", want: "srv"},
		{dst: "kansai", err: `destination "kansai": region has 3 nodes (osaka, r-kansai, x): name one`},
		{dst: "paris", err: `destination "paris": no node or region of that name (regions: Singapore, kansai, tokyo)`},
	} {
		got, err := m.Resolve(tc.dst)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("Resolve(%q) = %q, %v; want %q, %q", tc.dst, got, err, tc.want, tc.err)
		}
	}
}

// FuzzParseMatrix: no input panics; what parses is valid, survives a
// round trip through MarshalJSON, and can be planned over and explained.
func FuzzParseMatrix(f *testing.F) {
	f.Add([]byte(exampleMatrix))
	f.Add([]byte(`{"nodes": {"a": {"relay": true, "region": "x", "window_bytes": 1, "limit_bps": 2.5}, "b": {}, "c": {"relay": true}},` +
		` "rtt_ms": [{"a": "a", "b": "b", "rtt_ms": 1, "loss": 0.5, "estimated": true, "age_s": 400}, ["b", "c", 2], ["a", "c", 1e-9]]}`))
	f.Add([]byte(`{"nodes": {"a": {}, "b": {}}, "rtt_ms": [["a", "b", 1], {"a": "b", "b": "a", "rtt_ms": 1, "loss": 1}]}`))
	f.Add([]byte(`{"nodes": {"a": {}}, "rtt_ms": null}`))
	f.Add([]byte(`{"nodes": {"\u00e9": {"region": "\u00e9"}}, "nodes": {}}`))
	f.Add([]byte(`[1, "x", null, true, {"a": [[]]}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMatrix(data)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("parsed but invalid: %v", err)
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		back, err := ParseMatrix(out)
		if err != nil {
			t.Fatalf("reparse %s: %v", out, err)
		}
		if !reflect.DeepEqual(back, m) {
			t.Fatalf("round trip: %+v, want %+v", back, m)
		}
		if len(m.Nodes) < 2 {
			return
		}
		for _, dir := range []Direction{Down, Both} {
			req := Request{Client: m.Nodes[0].Name, Destination: m.Nodes[len(m.Nodes)-1].Name, Direction: dir, Constraints: Constraints{UseStale: true}}
			r, err := Search(m, req)
			if err != nil {
				t.Fatalf("Search %+v: %v", req, err)
			}
			_ = Explain(r)
			if _, err := json.Marshal(r); err != nil {
				t.Fatalf("marshal result: %v", err)
			}
		}
	})
}

func TestRelaysAmong(t *testing.T) {
	m := &Matrix{Nodes: []Node{{Name: "client"}, {Name: "r1", Relay: true}, {Name: "r2", Relay: true}, {Name: "dst"}}}
	if got := m.RelaysAmong([]string{"r2", "gone", "client", "r1"}); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Fatalf("RelaysAmong = %v, want [r1 r2]: only relays of the matrix", got)
	}
}

// One bad entry costs that entry, not the matrix: Sanitize leaves out what
// Validate refuses, with a note each, and keeps the client and the
// destination for Search to judge.
func TestSanitize(t *testing.T) {
	m := &Matrix{
		Nodes: []Node{
			{Name: "client"}, {Name: "srv"}, {Name: "r1", Relay: true},
			{Name: "bad name", Relay: true}, {Name: "r2", Relay: true, WindowBytes: -1},
			{Name: "r3", Relay: true, LimitBps: math.NaN()}, {Name: "r4", Relay: true, CongestionControl: "BBR"},
			{Name: "r1", Relay: true, WindowBytes: 1},
		},
		Pairs: []Pair{
			{A: "client", B: "srv", RTTMs: 50}, {A: "client", B: "r1", RTTMs: 10}, {A: "r1", B: "srv", RTTMs: 40},
			{A: "bad name", B: "srv", RTTMs: 5}, {A: "r1", B: "client", RTTMs: 11}, {A: "r1", B: "ghost", RTTMs: 5},
			{A: "client", B: "r4", RTTMs: -1},
		},
	}
	notes := Sanitize(m, "client", "srv")
	if err := m.Validate(); err != nil {
		t.Fatalf("sanitized matrix: %v", err)
	}
	if len(m.Nodes) != 3 || len(m.Pairs) != 3 {
		t.Fatalf("kept %d nodes, %d pairs: want client, srv, r1 and their 3 pairs; notes %q", len(m.Nodes), len(m.Pairs), notes)
	}
	for _, want := range []string{`node "bad name" left out`, `node "r2" left out: window_bytes -1`, `node "r3" left out: limit_bps NaN`,
		`node "r4" left out: congestion_control "BBR"`, `node "r1" left out: duplicate name`, `("r1", "client") left out: duplicate pair`,
		`("r1", "ghost") left out`, `("client", "r4") left out`} {
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, want) }) {
			t.Errorf("no note %q in %q", want, notes)
		}
	}
	// The client and destination stay for Search to judge.
	bad := &Matrix{Nodes: []Node{{Name: "client", WindowBytes: -5}, {Name: "srv"}}}
	if Sanitize(bad, "client", "srv"); len(bad.Nodes) != 2 {
		t.Fatalf("the client was dropped: %+v", bad.Nodes)
	}
	if _, err := Search(bad, Request{Client: "client", Destination: "srv"}); err == nil {
		t.Error("Search planned for a client with a negative window")
	}
}
