package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestWritePAC(t *testing.T) {
	var b bytes.Buffer
	writePAC(&b, []string{"plan: r1"}, []string{"*.jp", "a\"b"}, "10.0.0.1:1080")
	got := b.String()
	for _, want := range []string{
		"// plan: r1\n",
		`if (shExpMatch(host, "*.jp") || shExpMatch(host, "a\"b"))`,
		`return "SOCKS5 10.0.0.1:1080; SOCKS 10.0.0.1:1080; DIRECT";`,
		`return "DIRECT";`,
	} {
		if !strings.Contains(got, want) {
			t.Fatalf("PAC lacks %q:\n%s", want, got)
		}
	}
	b.Reset()
	writePAC(&b, nil, []string{"*.jp"}, "") // direct plan
	if strings.Contains(b.String(), "SOCKS") {
		t.Fatalf("direct plan sends hosts to a proxy:\n%s", b.String())
	}
}
