package fleet

import (
	"os"
	"reflect"
	"testing"
)

// FuzzParse: any bytes either parse into a fleet (bad entries skipped) or
// fail with an error, never a panic; what is kept is valid, and survives a
// Marshal/Parse round trip with nothing skipped.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("../../configs/fleet.example.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("relays:\n  - name: a\n    admin: 10.0.0.1:9090\n    relay: 10.0.0.1:7000\n"))
	f.Add([]byte("admin_token: x\nrelays: []\n"))
	f.Add([]byte("relays:\n  - name: a\n  - name: a\n"))
	f.Add([]byte("relays: [{name: b, socks: nohostport}]"))
	f.Add([]byte("relays:\n  - &x {name: a}\n  - *x\n  - {nme: c}\n  - 7\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		out, err := file.Marshal()
		if err != nil {
			t.Fatalf("marshal of a parsed fleet: %v", err)
		}
		again, err := Parse(out)
		if err != nil || len(again.Skipped) > 0 {
			t.Fatalf("a marshalled fleet does not parse cleanly: %v %v\n%s", err, again.Problems(), out)
		}
		seen := map[string]bool{}
		for _, r := range file.Relays {
			if err := r.validate(); err != nil || seen[r.Name] {
				t.Fatalf("kept a bad entry %+v: %v", r, err)
			}
			seen[r.Name] = true
		}
		if !reflect.DeepEqual(normalize(file), normalize(again)) {
			t.Fatalf("round trip changed the fleet:\n%+v\n%+v", file, again)
		}
	})
}

// normalize makes nil and empty relay lists equal and drops Skipped.
func normalize(f *File) File {
	c := *f
	c.Skipped = nil
	if len(c.Relays) == 0 {
		c.Relays = nil
	}
	return c
}
