package fleet

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in  string
		wantErr   string   // the whole file refused
		wantNames []string // relays kept
		skipped   []string // one per skipped entry, in order
	}{
		{name: "ok", in: "relays:\n  - {name: r1, region: osaka, socks: 10.0.0.1:1080}\n", wantNames: []string{"r1"}},
		{name: "empty", in: ""},
		{name: "not yaml", in: "relays: [\n", wantErr: "did not find expected"},
		{name: "unknown top-level key", in: "relay:\n  - {name: r1}\n", wantErr: "field relay not found"},
		{name: "unknown key", in: "relays:\n  - {name: r1, sox: 1}\n  - {name: r2}\n", wantNames: []string{"r2"},
			skipped: []string{`relays[0] (line 2, name "r1"): unknown key "sox" (known: name, region, socks, http, admin, relay); entry skipped`}},
		{name: "no name", in: "relays:\n  - {region: osaka}\n  - {name: r2}\n", wantNames: []string{"r2"},
			skipped: []string{"relays[0] (line 2): name: required; entry skipped"}},
		{name: "dup", in: "relays:\n  - {name: a}\n  - {name: b}\n  - {name: a, admin: 10.0.0.9:9090}\n", wantNames: []string{"a", "b"},
			skipped: []string{`relays[2] (line 4, name "a"): name "a" is already used by relays[0]; entry skipped`}},
		{name: "bad addr", in: "relays:\n  - {name: a, admin: nohostport, relay: x}\n  - {name: b}\n", wantNames: []string{"b"},
			skipped: []string{`relays[0] (line 2, name "a"): admin: "nohostport" is not host:port; relay: "x" is not host:port; entry skipped`}},
		{name: "not a mapping", in: "relays:\n  - 5\n  - {name: b}\n", wantNames: []string{"b"},
			skipped: []string{"relays[0] (line 2): cannot unmarshal !!int `5` into fleet.Relay; entry skipped"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names, skipped []string
			for _, r := range f.Relays {
				names = append(names, r.Name)
			}
			for _, e := range f.Skipped {
				skipped = append(skipped, e.Error())
			}
			if !slices.Equal(names, tc.wantNames) || !slices.Equal(skipped, tc.skipped) {
				t.Fatalf("kept %q skipped %q\nwant %q skipped %q", names, skipped, tc.wantNames, tc.skipped)
			}
			out, err := f.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if again, err := Parse(out); err != nil || len(again.Skipped) > 0 {
				t.Fatalf("round trip: %v %v", err, again.Problems())
			}
		})
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte("relays:\n  - {name: a}\n  - {nme: b}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Relays) != 1 || f.Problems() == nil || !strings.HasPrefix(f.Problems().Error(), path+": relays[1] (line 3)") {
		t.Fatalf("relays %v problems %v", f.Relays, f.Problems())
	}
}

func TestExampleFile(t *testing.T) {
	f, err := Load("../../configs/fleet.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Relays) != 3 || f.Problems() != nil {
		t.Fatalf("%d relays, %v", len(f.Relays), f.Problems())
	}
	if r, ok := f.Relay("osaka"); !ok || r.Admin != "203.0.113.20:9090" {
		t.Fatalf("osaka: %+v %v", r, ok)
	}
}
