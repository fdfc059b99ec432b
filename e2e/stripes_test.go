package e2e

import (
	"bytes"
	"strconv"
	"testing"
)

// TestStripedChain carries tunnels through entry → r1 → r2 with both
// segments striped: entry → r1 over 3 links the entry opens itself, r1 → r2
// over 4 that r1 opens from the header. Bytes come out whole and in order
// (curl's body, SHA-256 both ways, half-close), over TLS links and plain
// ones, and each relay says it received striped segments.
func TestStripedChain(t *testing.T) {
	for _, transport := range []string{"tls", "plain"} {
		t.Run(transport, func(t *testing.T) {
			secretFile := fleetSecretFile(t)
			common := []string{"--allow-private", "--fleet-secret-file", secretFile, "--transport", transport}
			r1Addr, r2Addr := freeAddr(t), freeAddr(t)
			r2 := startRelayd(t, append([]string{"--relay-listen", r2Addr}, common...)...)
			r1 := startRelayd(t, append([]string{"--relay-listen", r1Addr}, common...)...)
			entry := startRelayd(t, append(common,
				"--next", "relaymesh://"+r1Addr+"?stripes=3",
				"--next", "relaymesh://"+r2Addr+"?stripes=4")...)

			ts := fileServer(t)
			const body = 5 << 20
			got, err := curl(t, "-x", "socks5h://"+entry.socks, ts.URL+"/bytes/"+strconv.Itoa(body))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, pattern(body)) {
				t.Fatalf("curl: body mismatch, %d bytes", len(got))
			}
			checkSHA256BothWays(t, entry.socks, 4<<20)
			const upBytes, downBytes = 2 << 20, 1 << 20
			checkHalfClose(t, entry.socks, startHalfCloseServer(t, upBytes, downBytes).addr(), upBytes, downBytes)

			if v := metricValue(t, r1, `relaymesh_striped_segments_total{links="3"}`); v != 3 {
				t.Fatalf("r1 received %v segments striped over 3 links, want 3", v)
			}
			if v := metricValue(t, r2, `relaymesh_striped_segments_total{links="4"}`); v != 3 {
				t.Fatalf("r2 received %v segments striped over 4 links, want 3", v)
			}
		})
	}
}
