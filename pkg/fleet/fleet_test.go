package fleet

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in, wantErr string
	}{
		{"ok", "relays:\n  - {name: r1, region: osaka, socks: 10.0.0.1:1080}\n", ""},
		{"empty", "", ""},
		{"unknown key", "relays:\n  - {name: r1, sox: 1}\n", "field sox not found"},
		{"no name", "relays:\n  - {region: osaka}\n", "relays[0].name: required"},
		{"dup", "relays:\n  - {name: a}\n  - {name: a}\n", `relays[1].name: "a" listed twice`},
		{"bad addr", "relays:\n  - {name: a, admin: nohostport}\n", "relays[0].admin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.in))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				out, err := f.Marshal()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := Parse(out); err != nil {
					t.Fatalf("round trip: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestExampleFile(t *testing.T) {
	f, err := Load("../../configs/fleet.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Relays) != 3 {
		t.Fatalf("%d relays", len(f.Relays))
	}
	if r, ok := f.Relay("osaka"); !ok || r.Admin != "203.0.113.20:9090" {
		t.Fatalf("osaka: %+v %v", r, ok)
	}
}
