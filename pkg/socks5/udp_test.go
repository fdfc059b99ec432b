package socks5

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"testing"
)

func TestUDPDatagramRoundTrip(t *testing.T) {
	for _, a := range []Addr{
		{IP: netip.MustParseAddr("192.0.2.7"), Port: 53},
		{IP: netip.MustParseAddr("2001:db8::7"), Port: 443},
		{Host: "dns.example", Port: 853},
	} {
		b := append(AppendUDPHeader(nil, a), "payload"...)
		got, data, err := ParseUDPDatagram(b)
		if err != nil || got != a || string(data) != "payload" {
			t.Fatalf("%s: %+v %q %v", a, got, data, err)
		}
	}
	// What PySocks sends: RSV 0, FRAG 0, an IPv4 destination.
	got, data, err := ParseUDPDatagram([]byte{0, 0, 0, 1, 127, 0, 0, 1, 0, 53, 'q'})
	if err != nil || got.String() != "127.0.0.1:53" || string(data) != "q" {
		t.Fatalf("pysocks datagram: %+v %q %v", got, data, err)
	}
	// An empty payload is a datagram too.
	if _, data, err := ParseUDPDatagram([]byte{0, 0, 0, 1, 1, 2, 3, 4, 0, 9}); err != nil || len(data) != 0 {
		t.Fatalf("empty payload: %q %v", data, err)
	}
}

// A fragment (FRAG ≠ 0) is refused as such, so the relay drops it and
// counts it apart; truncations and bad addresses are errors, never panics.
func TestUDPDatagramRefused(t *testing.T) {
	for frag := 1; frag < 256; frag++ {
		if _, _, err := ParseUDPDatagram([]byte{0, 0, byte(frag), 1, 1, 2, 3, 4, 0, 53, 'x'}); !errors.Is(err, ErrFragment) {
			t.Fatalf("FRAG %d: %v, want ErrFragment", frag, err)
		}
	}
	full := append(AppendUDPHeader(nil, Addr{Host: "dns.example", Port: 53}), 'x')
	for cut := range len(full) - 1 {
		if _, _, err := ParseUDPDatagram(full[:cut]); err == nil {
			t.Fatalf("cut at %d parsed", cut)
		}
	}
	for name, b := range map[string][]byte{
		"unknown atyp": {0, 0, 0, 9, 1, 2, 3, 4, 0, 53},
		"empty domain": {0, 0, 0, 3, 0, 0, 53},
		"control byte": {0, 0, 0, 3, 2, 'a', '\n', 0, 53},
	} {
		if _, _, err := ParseUDPDatagram(b); err == nil || errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: %v, want an address error", name, err)
		}
	}
}

func FuzzParseUDPDatagram(f *testing.F) {
	f.Add(append(AppendUDPHeader(nil, Addr{IP: netip.MustParseAddr("192.0.2.7"), Port: 53}), "q"...))
	f.Add(append(AppendUDPHeader(nil, Addr{Host: "dns.example", Port: 53}), "q"...))
	f.Add([]byte{0, 0, 1, 1, 1, 2, 3, 4, 0, 53})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, data, err := ParseUDPDatagram(b)
		if err != nil {
			return
		}
		// What parses is the header we would write, then the data.
		again := append(AppendUDPHeader(nil, a), data...)
		if !bytes.Equal(again[3:], b[3:]) {
			t.Fatalf("re-marshal differs:\n%x\n%x", again, b)
		}
	})
}
