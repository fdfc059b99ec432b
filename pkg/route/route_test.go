package route

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	key   = []byte("0123456789abcdef-fleet-secret")
	t0    = time.UnixMilli(1_790_000_000_123)
	nonce = [NonceBytes]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
)

func sampleRequest() *Request {
	return &Request{Hops: []string{"10.0.0.2:7000", "osaka.example.net:7000", "[2001:db8::3]:7000"}, Dst: "example.com:443", Time: t0, Nonce: nonce}
}

func TestRequestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		hops []string
		dst  string
	}{
		{"no hops, domain", nil, "example.com:443"},
		{"ipv4 dst", []string{"1.2.3.4:7000"}, "93.184.216.34:80"},
		{"ipv6 dst", []string{"r2:7000", "r3:7000"}, "[2001:db8::1]:443"},
		{"mapped ipv6 stays v6", nil, "[::ffff:1.2.3.4]:80"},
		{"max hops, max host", []string{"a:1", "b:2", "c:3", "d:4", "e:5", "f:6", "g:7", "h:8"}, strings.Repeat("x", 255) + ":65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &Request{Hops: tc.hops, Dst: tc.dst, Time: t0, Nonce: nonce}
			b, err := in.Marshal(key)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > MaxHeaderBytes {
				t.Fatalf("header %d bytes", len(b))
			}
			out, err := ParseRequest(b, key, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !equalRequests(in, out) {
				t.Fatalf("round trip: got %+v, want %+v", out, in)
			}
		})
	}
}

func equalRequests(a, b *Request) bool {
	if len(a.Hops) != len(b.Hops) || a.Dst != b.Dst || !a.Time.Equal(b.Time) || a.Nonce != b.Nonce || !slices.Equal(a.Names, b.Names) ||
		max(a.InStripes, 1) != max(b.InStripes, 1) || !slices.Equal(a.Stripes, b.Stripes) {
		return false
	}
	for i := range a.Hops {
		if a.Hops[i] != b.Hops[i] {
			return false
		}
	}
	return true
}

// Named hops travel with their relay names (VersionNamed), at the longest
// within MaxHeaderBytes; a header keyed by a link verifies only with it.
func TestNamedRequest(t *testing.T) {
	long := strings.Repeat("n", MaxNameBytes)
	in := &Request{Hops: []string{"a:1", "b:2", "c:3", "d:4", "e:5", "f:6", "g:7", "h:8"}, Names: []string{long, long, long, long, long, long, long, "tokyo"},
		Dst: strings.Repeat("x", 255) + ":65535", Time: t0, Nonce: nonce}
	for i := range in.Hops {
		in.Hops[i] = strings.Repeat("h", 250) + in.Hops[i]
	}
	bind := bytes.Repeat([]byte{7}, 32)
	in.Bind = bind
	b, err := in.Marshal(LinkKey(nil, bind))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxHeaderBytes || b[4] != VersionNamed {
		t.Fatalf("header %d bytes, version %d", len(b), b[4])
	}
	out, err := ParseRequest(b, LinkKey(nil, bind), bind)
	if err != nil || !equalRequests(in, out) {
		t.Fatalf("round trip: %v: got %+v", err, out)
	}
	other := bytes.Repeat([]byte{8}, 32)
	if _, err := ParseRequest(b, LinkKey(nil, other), other); !errors.Is(err, ErrAuth) {
		t.Errorf("on another link: %v, want ErrAuth", err)
	}
	for _, bad := range [][]string{{"", "x", "x", "x", "x", "x", "x", "x"}, {"sp ace", "x", "x", "x", "x", "x", "x", "x"}, {long + "n", "x", "x", "x", "x", "x", "x", "x"}, {"x"}} {
		r := *in
		r.Names = bad
		if _, err := r.Marshal(key); err == nil {
			t.Errorf("names %q marshalled", bad)
		}
	}
}

// Without a fleet secret and a TLS link there is no key: nothing is sent,
// nothing is accepted (an empty HMAC key would be anyone's).
func TestNoKeyNoHeader(t *testing.T) {
	if _, err := sampleRequest().Marshal(LinkKey(nil, nil)); !errors.Is(err, ErrNoKey) {
		t.Errorf("Marshal: %v", err)
	}
	b, err := sampleRequest().Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseRequest(b, nil, nil); !errors.Is(err, ErrNoKey) {
		t.Errorf("ParseRequest: %v", err)
	}
	if _, err := (&Response{}).Marshal(nil, nonce); !errors.Is(err, ErrNoKey) {
		t.Errorf("Response.Marshal: %v", err)
	}
}

func TestRequestMarshalRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		hops []string
		dst  string
		want string
	}{
		{"too many hops", []string{"a:1", "b:1", "c:1", "d:1", "e:1", "f:1", "g:1", "h:1", "i:1"}, "x:1", "hops"},
		{"host too long", nil, strings.Repeat("x", 256) + ":1", "max 255"},
		{"no port", nil, "example.com", "missing port"},
		{"port zero", nil, "example.com:0", "1..65535"},
		{"empty host", nil, ":80", "empty host"},
		{"bad byte", nil, "exa mple.com:80", "0x20"},
		{"zone", nil, "[fe80::1%eth0]:80", "zoned"},
		{"bad hop", []string{"nope"}, "x:1", "hop 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (&Request{Hops: tc.hops, Dst: tc.dst, Time: t0}).Marshal(key)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestReadRequestRejects(t *testing.T) {
	good, err := sampleRequest().Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("bound to another link", func(t *testing.T) {
		r := sampleRequest()
		r.Bind = bytes.Repeat([]byte{1}, 32)
		b, err := r.Marshal(key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseRequest(b, key, r.Bind); err != nil {
			t.Fatalf("on its own link: %v", err)
		}
		for _, other := range [][]byte{nil, bytes.Repeat([]byte{2}, 32)} {
			if _, err := ParseRequest(b, key, other); !errors.Is(err, ErrAuth) {
				t.Fatalf("on link %x: err = %v, want ErrAuth", other, err)
			}
		}
		if _, err := ParseRequest(good, key, r.Bind); !errors.Is(err, ErrAuth) {
			t.Fatalf("unbound header on a bound link: err = %v, want ErrAuth", err)
		}
	})
	t.Run("wrong key", func(t *testing.T) {
		if _, err := ParseRequest(good, []byte("another-secret-of-the-fleet"), nil); !errors.Is(err, ErrAuth) {
			t.Fatalf("err = %v, want ErrAuth", err)
		}
	})
	t.Run("every byte flipped", func(t *testing.T) {
		for i := range good {
			b := bytes.Clone(good)
			b[i] ^= 0x01
			if r, err := ParseRequest(b, key, nil); err == nil {
				t.Fatalf("byte %d flipped: accepted %+v", i, r)
			}
		}
	})
	t.Run("every truncation", func(t *testing.T) {
		for n := 0; n < len(good); n++ {
			if _, err := ReadRequest(bytes.NewReader(good[:n]), key, nil); err == nil {
				t.Fatalf("truncated to %d bytes: accepted", n)
			} else if n > 0 && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("truncated to %d: err = %v", n, err)
			}
		}
	})
	t.Run("reads no byte past the header", func(t *testing.T) {
		rd := bytes.NewReader(append(bytes.Clone(good), "early"...))
		if _, err := ReadRequest(rd, key, nil); err != nil {
			t.Fatal(err)
		}
		if rd.Len() != len("early") {
			t.Fatalf("%d bytes left, want 5", rd.Len())
		}
	})
	for _, tc := range []struct {
		name string
		edit func(b []byte) []byte
	}{
		{"bad magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"version 2", func(b []byte) []byte { b[4] = 2; return b }},
		{"response type", func(b []byte) []byte { b[5] = typeResponse; return b }},
		{"9 hops", func(b []byte) []byte { b[requestPrefix-1] = 9; return b }},
		{"255 hops", func(b []byte) []byte { b[requestPrefix-1] = 255; return b }},
		{"unknown atyp", func(b []byte) []byte { b[requestPrefix] = 0x09; return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseRequest(tc.edit(bytes.Clone(good)), key, nil); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestResponse(t *testing.T) {
	for _, in := range []Response{
		{Status: StatusOK},
		{Status: StatusRefused, Hop: 2, Reason: "dial 10.0.0.9:443: connection refused"},
		{Status: StatusGeneral, Hop: 8, Reason: strings.Repeat("r", MaxReason)},
	} {
		b, err := in.Marshal(key, nonce)
		if err != nil {
			t.Fatal(err)
		}
		out, err := ParseResponse(b, key, nonce)
		if err != nil {
			t.Fatal(err)
		}
		if *out != in {
			t.Fatalf("got %+v, want %+v", out, in)
		}
		other := nonce
		other[0]++
		if _, err := ParseResponse(b, key, other); !errors.Is(err, ErrAuth) {
			t.Fatalf("response replayed onto another request: err = %v, want ErrAuth", err)
		}
		for i := range b {
			c := bytes.Clone(b)
			c[i] ^= 0x80
			if _, err := ParseResponse(c, key, nonce); err == nil {
				t.Fatalf("byte %d flipped: accepted", i)
			}
		}
	}
	if _, err := (&Response{Reason: strings.Repeat("r", 256)}).Marshal(key, nonce); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("long reason: err = %v", err)
	}
	if _, err := (&Response{Status: 8}).Marshal(key, nonce); err == nil {
		t.Fatal("unknown status marshalled")
	}
}

func TestReplayGuard(t *testing.T) {
	now := t0
	g := &ReplayGuard{Now: func() time.Time { return now }, MaxNonces: 3}
	req := func(ts time.Time, n byte) *Request { return &Request{Time: ts, Nonce: [NonceBytes]byte{n}} }

	if err := g.Check(req(now, 1)); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(req(now, 1)); !errors.Is(err, ErrReplay) {
		t.Fatalf("same nonce again: %v", err)
	}
	if err := g.Check(req(now.Add(-31*time.Second), 2)); !errors.Is(err, ErrStale) {
		t.Fatalf("31 s old: %v", err)
	}
	if err := g.Check(req(now.Add(31*time.Second), 2)); !errors.Is(err, ErrStale) {
		t.Fatalf("31 s ahead: %v", err)
	}
	if err := g.Check(req(now.Add(30*time.Second), 2)); err != nil {
		t.Fatalf("30 s ahead (skew within window): %v", err)
	}
	if err := g.Check(req(now.Add(-30*time.Second), 3)); err != nil {
		t.Fatalf("30 s old: %v", err)
	}
	if err := g.Check(req(now, 4)); !errors.Is(err, ErrFull) {
		t.Fatalf("past MaxNonces: %v", err)
	}
	// Nonce 1 is remembered until its timestamp leaves the window, so a
	// replay is caught at every moment it would pass the time check.
	now = t0.Add(30 * time.Second)
	if err := g.Check(req(t0, 1)); !errors.Is(err, ErrReplay) {
		t.Fatalf("replay at the window's edge: %v", err)
	}
	now = t0.Add(30*time.Second + time.Millisecond)
	if err := g.Check(req(t0, 1)); !errors.Is(err, ErrStale) {
		t.Fatalf("replay after the window: %v", err)
	}
	// Memory is bounded: after two windows everything is forgotten.
	now = t0.Add(61 * time.Second)
	if err := g.Check(req(now, 5)); err != nil {
		t.Fatal(err)
	}
	if n := g.Len(); n != 1 {
		t.Fatalf("guard holds %d nonces after two windows, want 1", n)
	}
}

// Fuzz targets: no panic, no allocation driven by a length field, and what
// parses re-marshals to the same bytes (one encoding per header).
func FuzzReadRequest(f *testing.F) {
	for _, r := range []*Request{sampleRequest(), {Dst: "a:1", Time: t0}, {Hops: []string{"[::1]:1"}, Dst: "1.2.3.4:5", Time: t0},
		{Hops: []string{"a:1"}, UDP: true, Time: t0},
		{Hops: []string{"a:1", "b:2"}, Names: []string{"a", "b"}, InStripes: 3, Stripes: []int{1, 4}, Dst: "c:3", Time: t0}} {
		b, err := r.Marshal(key)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("RMSH\x01\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b, key, nil)
		if err != nil {
			return
		}
		again, err := r.Marshal(key)
		if err != nil {
			t.Fatalf("parsed %+v but cannot marshal it: %v", r, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-marshal differs:\n%x\n%x", again, b)
		}
	})
}

func FuzzReadResponse(f *testing.F) {
	for _, r := range []Response{{Status: StatusOK}, {Status: StatusRefused, Hop: 3, Reason: "refused"}} {
		b, err := r.Marshal(key, nonce)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("RMSH\x01\x02\x07\x00\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseResponse(b, key, nonce)
		if err != nil {
			return
		}
		again, err := r.Marshal(key, nonce)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-marshal differs (%v):\n%x\n%x", err, again, b)
		}
	})
}
