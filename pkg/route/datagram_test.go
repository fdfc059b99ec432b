package route

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte{0xab}, MaxFrameBytes-1-16-2)
	for _, d := range []Datagram{
		{IP: netip.MustParseAddr("192.0.2.1"), Port: 53, Payload: []byte("query")},
		{IP: netip.MustParseAddr("2001:db8::1"), Port: 443, Payload: nil},
		{IP: netip.MustParseAddr("::ffff:1.2.3.4"), Port: 1, Payload: []byte{0}},
		{Host: "dns.example", Port: 853, Payload: []byte("x")},
		{Host: strings.Repeat("a", 255), Port: 65535, Payload: []byte("long name")},
		{IP: netip.MustParseAddr("2001:db8::2"), Port: 9, Payload: big}, // the largest frame
	} {
		b, err := AppendFrame([]byte("prefix"), &d)
		if err != nil {
			t.Fatalf("%s: %v", d.Addr(), err)
		}
		r := bytes.NewReader(b[len("prefix"):])
		got, err := ReadFrame(r, make([]byte, MaxFrameBytes))
		if err != nil {
			t.Fatalf("%s: %v", d.Addr(), err)
		}
		if got.Host != d.Host || got.IP != d.IP || got.Port != d.Port || !bytes.Equal(got.Payload, d.Payload) {
			t.Fatalf("round trip: got %s %d bytes, want %s %d bytes", got.Addr(), len(got.Payload), d.Addr(), len(d.Payload))
		}
		if r.Len() != 0 {
			t.Fatalf("%s: ReadFrame left %d bytes", d.Addr(), r.Len())
		}
		if _, err := ReadFrame(r, make([]byte, MaxFrameBytes)); err != io.EOF {
			t.Fatalf("after the last frame: %v, want io.EOF", err)
		}
	}
}

// Frames queued back to back split one by one, and what the protocol
// cannot carry is refused before it is queued (b unchanged).
func TestFrameSplitAndRefusals(t *testing.T) {
	var b []byte
	var err error
	for i, host := range []string{"a.example", "b.example", "c.example"} {
		if b, err = AppendFrame(b, &Datagram{Host: host, Port: uint16(i + 1), Payload: []byte(host)}); err != nil {
			t.Fatal(err)
		}
	}
	for i, host := range []string{"a.example", "b.example", "c.example"} {
		var d Datagram
		if d, b, err = SplitFrame(b); err != nil || d.Host != host || d.Port != uint16(i+1) || string(d.Payload) != host {
			t.Fatalf("frame %d: %+v, %v", i, d, err)
		}
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes left", len(b))
	}
	for _, d := range []Datagram{
		{Host: "a.example", Port: 0},
		{Host: "", Port: 53},
		{Host: "bad host", Port: 53},
		{Host: "1.2.3.4", Port: 53},
		{IP: netip.MustParseAddr("fe80::1%eth0"), Port: 53},
		{IP: netip.MustParseAddr("192.0.2.1"), Port: 53, Payload: make([]byte, MaxFrameBytes)},
	} {
		out, err := AppendFrame([]byte("keep"), &d)
		if err == nil || string(out) != "keep" {
			t.Errorf("%q port %d, %d bytes: %q, %v; want an error and b unchanged", d.Addr(), d.Port, len(d.Payload), out, err)
		}
	}
}

func TestFrameMalformed(t *testing.T) {
	for name, body := range map[string][]byte{
		"empty":            {},
		"unknown type":     {0x02, 1, 2},
		"short ipv4":       {atypIPv4, 1, 2, 3},
		"short ipv6":       {atypIPv6, 1, 2, 3, 4},
		"short domain":     {atypDomain, 5, 'a', 'b'},
		"empty domain":     {atypDomain, 0, 0, 53},
		"domain bad byte":  {atypDomain, 3, 'a', '/', 'b', 0, 53},
		"domain is an ip":  append(append([]byte{atypDomain, 7}, "1.2.3.4"...), 0, 53),
		"port 0":           {atypIPv4, 1, 2, 3, 4, 0, 0},
		"no port":          {atypIPv4, 1, 2, 3, 4, 0},
		"domain, no port":  {atypDomain, 1, 'a'},
		"ipv6, short port": {atypIPv6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 7},
	} {
		if _, err := ParseFrame(body); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	// Truncated on the stream: inside the length or the body is not a
	// clean end.
	full, _ := AppendFrame(nil, &Datagram{Host: "a.example", Port: 53, Payload: []byte("query")})
	for cut := 1; cut < len(full); cut++ {
		if _, err := ReadFrame(bytes.NewReader(full[:cut]), make([]byte, MaxFrameBytes)); err != io.ErrUnexpectedEOF {
			t.Fatalf("cut at %d: %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
}

// An association's header names the hops and no destination; it is not a
// tunnel's header (the type byte differs, under the MAC), and it verifies
// only as what it is.
func TestAssociateRequest(t *testing.T) {
	in := &Request{Hops: []string{"10.0.0.2:7000", "[2001:db8::3]:7000"}, Names: []string{"osaka", "tokyo"}, UDP: true, Time: t0, Nonce: nonce}
	b, err := in.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ParseRequest(b, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !out.UDP || out.Dst != "" || !equalRequests(in, out) {
		t.Fatalf("round trip: got %+v, want %+v", out, in)
	}
	tunnel := *in
	tunnel.UDP, tunnel.Dst = false, "example.com:443"
	tb, _ := tunnel.Marshal(key)
	if got, err := ParseRequest(tb, key, nil); err != nil || got.UDP {
		t.Fatalf("a tunnel's header parsed as %+v, %v", got, err)
	}
	// Flip the type byte: the MAC no longer verifies.
	b[5] = typeRequest
	if _, err := ParseRequest(b, key, nil); err == nil {
		t.Fatal("an association's header with its type changed still parsed")
	}
	if _, err := (&Request{UDP: true, Dst: "a:1", Time: t0}).Marshal(key); err == nil {
		t.Fatal("a UDP association with a destination marshalled")
	}
}

func FuzzReadFrame(f *testing.F) {
	for _, d := range []Datagram{
		{IP: netip.MustParseAddr("192.0.2.1"), Port: 53, Payload: []byte("query")},
		{IP: netip.MustParseAddr("2001:db8::1"), Port: 443},
		{Host: "dns.example", Port: 853, Payload: []byte("x")},
	} {
		b, err := AppendFrame(nil, &d)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0, 3, atypDomain, 0, 0})
	f.Add([]byte{0xff, 0xff})
	buf := make([]byte, MaxFrameBytes)
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		d, err := ReadFrame(r, buf)
		if err != nil {
			return
		}
		read := b[:len(b)-r.Len()]
		again, err := AppendFrame(nil, &d)
		if err != nil {
			t.Fatalf("parsed %s (%d bytes) but cannot frame it: %v", d.Addr(), len(d.Payload), err)
		}
		if !bytes.Equal(again, read) {
			t.Fatalf("re-framed differs:\n%x\n%x", again, read)
		}
	})
}
