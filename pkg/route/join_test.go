package route

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// A striped request carries the links of the segment into the receiver and
// of each later one, names or not; one encoding per header.
func TestStripedRequest(t *testing.T) {
	for _, in := range []*Request{
		{Hops: []string{"b:2", "c:3"}, InStripes: 4, Stripes: []int{1, 8}, Dst: "d:4", Time: t0, Nonce: nonce},
		{Hops: []string{"b:2"}, Names: []string{"b"}, Stripes: []int{3}, Dst: "d:4", Time: t0, Nonce: nonce},
		{InStripes: 2, Dst: "d:4", Time: t0, Nonce: nonce},
	} {
		b, err := in.Marshal(key)
		if err != nil {
			t.Fatal(err)
		}
		if b[4] != VersionStriped {
			t.Fatalf("version %d, want %d", b[4], VersionStriped)
		}
		out, err := ParseRequest(b, key, nil)
		if err != nil || !equalRequests(in, out) {
			t.Fatalf("round trip: %v: got %+v, want %+v", err, out, in)
		}
	}
	plain := &Request{Hops: []string{"b:2"}, Stripes: []int{1}, InStripes: 1, Dst: "d:4", Time: t0, Nonce: nonce}
	if b, err := plain.Marshal(key); err != nil || b[4] != Version {
		t.Fatalf("unstriped request: version %d, %v; want %d", b[4], err, Version)
	}
	for _, bad := range []*Request{
		{Hops: []string{"b:2"}, Stripes: []int{MaxStripes + 1}, Dst: "d:4", Time: t0},
		{InStripes: -1, Dst: "d:4", Time: t0},
		{Hops: []string{"b:2"}, Stripes: []int{2, 2}, Dst: "d:4", Time: t0},
		{Hops: []string{"b:2"}, Stripes: []int{2}, UDP: true, Time: t0},
	} {
		if _, err := bad.Marshal(key); err == nil {
			t.Errorf("%+v marshalled", bad)
		}
	}
}

func TestReadStripedRequestRejects(t *testing.T) {
	in := &Request{Hops: []string{"b:2"}, Stripes: []int{2}, Dst: "d:4", Time: t0, Nonce: nonce}
	good, err := in.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	// The flags byte and the receiver's links follow the 31-byte prefix;
	// the hop's links follow its address (atyp, 3 bytes "b", port).
	hopLinks := requestPrefix + 2 + 1 + 1 + 1 + 2
	for name, mutate := range map[string]func(b []byte){
		"unknown flag":   func(b []byte) { b[requestPrefix] = 2 },
		"zero links":     func(b []byte) { b[requestPrefix+1] = 0 },
		"too many links": func(b []byte) { b[hopLinks] = MaxStripes + 1 },
		"none striped":   func(b []byte) { b[hopLinks] = 1 },
	} {
		b := bytes.Clone(good)
		mutate(b)
		// Re-MAC so that only the mutation can fail it.
		b = appendMAC(b[:len(b)-MACBytes], key, nil)
		if _, err := ParseRequest(b, key, nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// A join verifies only on the link it was made for, under the fleet's key,
// and says which link of which request it is.
func TestJoin(t *testing.T) {
	bind := bytes.Repeat([]byte{7}, 32)
	j, err := NewJoin(nonce, 2, 4, t0)
	if err != nil {
		t.Fatal(err)
	}
	j.Bind = bind
	b, err := j.Marshal(LinkKey(nil, bind))
	if err != nil {
		t.Fatal(err)
	}
	if !IsJoin(b) {
		t.Fatal("IsJoin false on a join")
	}
	req, _ := sampleRequest().Marshal(key)
	if IsJoin(req) {
		t.Fatal("IsJoin true on a request")
	}
	out, err := ReadJoin(bytes.NewReader(b), LinkKey(nil, bind), bind)
	if err != nil {
		t.Fatal(err)
	}
	if out.Group != nonce || out.Index != 2 || out.Count != 4 || out.Nonce != j.Nonce || !out.Time.Equal(t0) {
		t.Fatalf("round trip: got %+v", out)
	}
	other := bytes.Repeat([]byte{8}, 32)
	if _, err := ReadJoin(bytes.NewReader(b), LinkKey(nil, other), other); !errors.Is(err, ErrAuth) {
		t.Errorf("on another link: %v, want ErrAuth", err)
	}
	if _, err := ReadJoin(bytes.NewReader(b), []byte("another fleet's secret"), bind); !errors.Is(err, ErrAuth) {
		t.Errorf("under another key: %v, want ErrAuth", err)
	}
	for _, bad := range [][2]int{{0, 4}, {4, 4}, {1, 1}, {1, MaxStripes + 1}} {
		j := &Join{Index: bad[0], Count: bad[1], Time: t0}
		if _, err := j.Marshal(key); !errors.Is(err, ErrMalformed) {
			t.Errorf("link %d of %d: %v, want ErrMalformed", bad[0], bad[1], err)
		}
	}
	var g ReplayGuard
	g.Now = func() time.Time { return t0 }
	if err := g.CheckJoin(out); err != nil {
		t.Fatal(err)
	}
	if err := g.CheckJoin(out); !errors.Is(err, ErrReplay) {
		t.Fatalf("the same join twice: %v, want ErrReplay", err)
	}
}
