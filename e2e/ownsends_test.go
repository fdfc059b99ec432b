package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/planner"
)

// TestConnectLearnsFromItsOwnUploads: relayctl connect, planning uploads
// to a sink (--dst, --direction up), carries a 16 MiB upload there
// directly; its next plan's direct segment, whose sender is this host,
// carries what connect's own socket taught: the loss of its sends
// (loss_source tunnels; on loopback mostly 0, but a run lost 1.9 %) and
// the window the sink advertised to it (not assumed), with a note saying
// it was learnt from connect's traffic. A rate is learnt only where the
// path held the sends, which loopback rarely does: the lab test
// TestLabConnectLearnsUpload checks it. The sink listens on 127.0.0.2, apart from the relay
// and the client on 127.0.0.1: what is learnt is kept by host.
func TestConnectLearnsFromItsOwnUploads(t *testing.T) {
	const uploadBytes = 16 << 20
	received := make(chan int64, 1)
	sink := startServerAt(t, "127.0.0.2:0", func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		if n > 0 {
			received <- n
		}
	})
	secret := fleetSecretFile(t)
	relayAddr, adminAddr := freeAddr(t), freeAddr(t)
	startRelayd(t, "--name", "r1", "--allow-private", "--relay-listen", relayAddr, "--admin", adminAddr, "--fleet-secret-file", secret)
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet.yaml")
	writeFile(t, fleet, "relays:\n  - {name: r1, region: here, admin: "+adminAddr+", relay: "+relayAddr+"}\n")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	socks := freeAddr(t)
	cmd := exec.CommandContext(ctx, relayctlBin, "connect", "--fleet", fleet, "--fleet-secret-file", secret,
		"--dst", sink.addr(), "--direction", "up", "--replan", "2s", "--bench-history", "",
		// Loopback RTTs are noise (a run had the chain through r1 1.36×
		// direct): the upload must go direct, so no chain may win.
		"--min-gain", "100",
		"--socks", socks, "--http", "", "--log-level", "debug")
	var log syncBuf
	stop := startConnectLogged(t, cmd, &log, "via direct")
	defer stop()

	// Before any upload the destination's window is unknown.
	before := waitPlanDetails(t, &log, 0, func(planDetails) bool { return true })
	if seg := before.DirectSegments[0]; !seg.WindowAssumed || seg.LossSource == planner.LearntFromTunnels {
		t.Fatalf("before any upload, the direct segment %+v: want the window assumed and no loss from tunnels", seg)
	}

	c, raw, err := xnetDial(t, socks, sink.addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(make([]byte, uploadBytes)); err != nil {
		t.Fatal(err)
	}
	if err := raw.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, c) // until the sink closes
	c.Close()
	select {
	case n := <-received:
		if n != uploadBytes {
			t.Fatalf("the sink received %d of %d bytes", n, uploadBytes)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sink received nothing in 30 s")
	}

	after := waitPlanDetails(t, &log, before.end, func(p planDetails) bool {
		return len(p.DirectSegments) > 0 && p.DirectSegments[0].LossSource == planner.LearntFromTunnels
	})
	seg := after.DirectSegments[0]
	if seg.Sender != "client" || seg.Receiver != sink.addr() {
		t.Fatalf("direct segment %+v: want this host sending to the sink", seg)
	}
	if seg.WindowAssumed || seg.WindowBytes <= 0 {
		t.Errorf("after a 16 MiB upload, the direct segment %+v: want the sink's window learnt", seg)
	}
	if !strings.Contains(strings.Join(after.Notes, "\n"), "learnt from relayctl connect's traffic") {
		t.Errorf("notes %q: want the window's source", after.Notes)
	}
	t.Logf("learnt: window %d bytes, loss %v (%s), rate %.1f Mbit/s (%s); the plan after it: %v", seg.WindowBytes, seg.Loss, seg.LossSource,
		seg.LearntBps/1e6, seg.LearntSource, after.Chain)
	stop()
	if strings.Contains(log.String(), "WARNING: DATA RACE") { // RELAYMESH_E2E_RACE builds connect with -race
		t.Fatalf("relayctl connect reported a data race:\n%s", log.String())
	}
}

// planDetails is connect's "plan details" debug log line (pkg/planroute).
type planDetails struct {
	Chain          []string          `json:"chain"`
	Segments       []planner.Segment `json:"segments"`
	DirectSegments []planner.Segment `json:"direct_segments"`
	Notes          []string          `json:"notes"`
	end            int               // where the line ends in the log
}

// waitPlanDetails waits up to 30 s for a "plan details" line in log, after
// its first from bytes, that cond accepts.
func waitPlanDetails(t *testing.T, log *syncBuf, from int, cond func(planDetails) bool) planDetails {
	t.Helper()
	const msg = "\tplan details\t"
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		all := log.String()
		for at := from; at < len(all); {
			n := strings.IndexByte(all[at:], '\n')
			if n < 0 {
				break // a line still being written
			}
			line := all[at : at+n]
			at += n + 1
			i := strings.Index(line, msg)
			if i < 0 {
				continue
			}
			var p planDetails
			if err := json.Unmarshal([]byte(line[i+len(msg):]), &p); err != nil {
				t.Fatalf("plan details: %v\n%s", err, line)
			}
			if p.end = at; cond(p) {
				return p
			}
		}
	}
	t.Fatalf("no plan details as wanted in 30 s:\n%s", lastLines(log.String(), 40))
	return planDetails{}
}
