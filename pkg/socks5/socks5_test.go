package socks5

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"testing"
)

func TestRequestRoundTrip(t *testing.T) {
	for _, hp := range []string{"1.2.3.4:80", "[2001:db8::1]:443", "example.com:8080", "[::ffff:127.0.0.1]:1"} {
		a, err := ParseAddr(hp)
		if err != nil {
			t.Fatalf("%s: %v", hp, err)
		}
		req, err := ReadRequest(bytes.NewReader(MarshalRequest(CmdConnect, a)))
		if err != nil {
			t.Fatalf("%s: %v", hp, err)
		}
		if req.Cmd != CmdConnect || req.Addr != a {
			t.Fatalf("%s: got %+v want %+v", hp, req.Addr, a)
		}
	}
}

func TestReplyRoundTrip(t *testing.T) {
	bound := Addr{IP: netip.MustParseAddr("10.0.0.1"), Port: 1080}
	rep, a, err := ReadReply(bytes.NewReader(MarshalReply(ReplyConnectionRefused, bound)))
	if err != nil || rep != ReplyConnectionRefused || a != bound {
		t.Fatalf("got %v %+v %v", rep, a, err)
	}
	if b := MarshalReply(ReplySucceeded, Addr{}); !bytes.Equal(b, []byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("zero bound addr: % x", b)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		read func(io.Reader) error
		want error
	}{
		{"greeting version", []byte{4, 1, 0}, func(r io.Reader) error { _, err := ReadGreeting(r); return err }, ErrVersion},
		{"no methods", []byte{5, 0}, func(r io.Reader) error { _, err := ReadGreeting(r); return err }, ErrNoMethods},
		{"greeting truncated", []byte{5, 3, 0}, func(r io.Reader) error { _, err := ReadGreeting(r); return err }, io.ErrUnexpectedEOF},
		{"atyp", []byte{5, 1, 0, 7}, func(r io.Reader) error { _, err := ReadRequest(r); return err }, ErrAddrType},
		{"empty domain", []byte{5, 1, 0, 3, 0, 0, 80}, func(r io.Reader) error { _, err := ReadRequest(r); return err }, ErrEmptyHost},
		{"crlf in domain", append([]byte{5, 1, 0, 3, 8}, "a\r\nX: yz"[:8]+"\x00\x50"...), func(r io.Reader) error { _, err := ReadRequest(r); return err }, ErrBadHost},
		{"space in domain", append([]byte{5, 1, 0, 3, 3}, "a b\x00\x50"...), func(r io.Reader) error { _, err := ReadRequest(r); return err }, ErrBadHost},
		{"reserved", []byte{5, 1, 1, 1, 1, 2, 3, 4, 0, 80}, func(r io.Reader) error { _, err := ReadRequest(r); return err }, ErrReserved},
		{"reply version", []byte{4, 0, 0, 1, 0, 0, 0, 0, 0, 0}, func(r io.Reader) error { _, _, err := ReadReply(r); return err }, ErrVersion},
		{"reply truncated", []byte{5, 0, 0, 4, 1}, func(r io.Reader) error { _, _, err := ReadReply(r); return err }, io.ErrUnexpectedEOF},
		{"userpass version", []byte{5, 1, 'a', 1, 'b'}, func(r io.Reader) error { _, _, err := ReadUserPass(r); return err }, nil},
	}
	for _, tc := range cases {
		err := tc.read(bytes.NewReader(tc.in))
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v want %v", tc.name, err, tc.want)
		}
	}
}

func TestUserPass(t *testing.T) {
	msg, err := MarshalUserPass("alice", "pw")
	if err != nil {
		t.Fatal(err)
	}
	u, p, err := ReadUserPass(bytes.NewReader(msg))
	if err != nil || u != "alice" || p != "pw" {
		t.Fatalf("%q %q %v", u, p, err)
	}
	if _, err := MarshalUserPass(string(make([]byte, 256)), "x"); err == nil {
		t.Fatal("256-byte username accepted")
	}
}

// Fuzz targets: no panics, and what parses re-marshals to the same bytes.

func FuzzReadGreeting(f *testing.F) {
	f.Add([]byte{5, 2, 0, 2})
	f.Add([]byte{5, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ReadGreeting(bytes.NewReader(b))
		if err == nil && !bytes.HasPrefix(b, MarshalGreeting(m...)) {
			t.Fatalf("round trip: % x", b)
		}
	})
}

func FuzzReadRequest(f *testing.F) {
	f.Add(MarshalRequest(CmdConnect, Addr{Host: "example.com", Port: 80}))
	f.Add(MarshalRequest(CmdConnect, Addr{IP: netip.MustParseAddr("::1"), Port: 1}))
	f.Add([]byte{5, 1, 0, 3, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := ReadRequest(bytes.NewReader(b))
		if err == nil && !bytes.HasPrefix(b, MarshalRequest(req.Cmd, req.Addr)) {
			t.Fatalf("round trip: % x", b)
		}
	})
}

func FuzzReadUserPass(f *testing.F) {
	f.Add([]byte{1, 5, 'a', 'l', 'i', 'c', 'e', 2, 'p', 'w'})
	f.Fuzz(func(t *testing.T, b []byte) {
		u, p, err := ReadUserPass(bytes.NewReader(b))
		if err == nil {
			msg, merr := MarshalUserPass(u, p)
			if merr != nil || !bytes.HasPrefix(b, msg) {
				t.Fatalf("round trip: % x", b)
			}
		}
	})
}

// FuzzReadReply is the client side: a malicious server must not panic us.
func FuzzReadReply(f *testing.F) {
	f.Add(MarshalReply(ReplySucceeded, Addr{}))
	f.Add([]byte{5, 0, 0, 3, 255})
	f.Add([]byte{5, 0, 0, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = ReadReply(bytes.NewReader(b))
		_, _ = ReadMethodChoice(bytes.NewReader(b))
		_, _ = ReadAuthStatus(bytes.NewReader(b))
	})
}
