package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/bench/labpeer"
	"github.com/relaymesh/relaymesh/pkg/lab"
	"github.com/relaymesh/relaymesh/pkg/traffic"
	"github.com/relaymesh/relaymesh/pkg/traffic/traffictest"
)

// The chaos client runs inside the lab's client node: this test binary,
// re-executed there with chaosEnv set (TestMain hands over to it).
const chaosEnv = "RELAYMESH_CHAOS_CLIENT"

// chaosPort and chaosRelayPort are the extra relayd's SOCKS5 and relay
// listener on every relay node (the lab's own relayd keeps 1080 and 7000).
const (
	chaosPort      = 1081
	chaosRelayPort = 7001
	chaosSize      = 2 << 20
)

// chaosResult is what the chaos client reports.
type chaosResult struct {
	OK        int      `json:"ok"`
	Failed    int      `json:"failed"`    // the client saw an error: reported
	Corrupted int      `json:"corrupted"` // complete length with wrong bytes, or success with a short body
	Errors    []string `json:"errors"`    // a sample of the failures
}

func TestMain(m *testing.M) {
	if os.Getenv(chaosEnv) != "" {
		os.Exit(chaosClient())
	}
	os.Exit(m.Run())
}

// chaosClient keeps $CHAOS_WORKERS downloads going through the relays in
// $CHAOS_ENTRIES (round robin) for $CHAOS_SECONDS, checks each one's
// SHA-256, and prints a chaosResult.
func chaosClient() int {
	workers, _ := strconv.Atoi(os.Getenv("CHAOS_WORKERS"))
	secs, _ := strconv.Atoi(os.Getenv("CHAOS_SECONDS"))
	var entries []string
	if err := json.Unmarshal([]byte(os.Getenv("CHAOS_ENTRIES")), &entries); err != nil || len(entries) == 0 || workers < 1 {
		fmt.Fprintln(os.Stderr, "chaos client: bad settings")
		return 2
	}
	want := traffic.ExpectedSHA256(chaosSize)
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	var ok, failed, corrupted atomic.Int64
	var mu sync.Mutex
	var samples []string
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				entry := entries[(w+i)%len(entries)]
				n, sum, err := chaosDownload(entry)
				switch {
				case err == nil && n == chaosSize && sum == want:
					ok.Add(1)
				case n == chaosSize && sum != want, err == nil && n != chaosSize:
					corrupted.Add(1)
					mu.Lock()
					samples = append(samples, fmt.Sprintf("CORRUPTED via %s: %d bytes, err %v", entry, n, err))
					mu.Unlock()
				default:
					failed.Add(1)
					mu.Lock()
					if len(samples) < 20 {
						samples = append(samples, fmt.Sprintf("failed via %s after %d bytes: %v", entry, n, err))
					}
					mu.Unlock()
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	res := chaosResult{OK: int(ok.Load()), Failed: int(failed.Load()), Corrupted: int(corrupted.Load()), Errors: samples}
	_ = json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

func chaosDownload(socks string) (int64, string, error) {
	return traffictest.GetViaSOCKS5(context.Background(), socks, fmt.Sprintf("http://server:%d/bytes/%d", lab.TrafficPort, chaosSize), 30*time.Second)
}

// TestLabChaos is the chaos run of docs/reliability.md (in this file so that it runs
// last of the package: tearing down its namespaces, with thousands of
// sockets, keeps the kernel busy for a while, and the next lab's emulator
// ran late right after it): 4 relays in a ring, every
// download entering at one relay and leaving through the next (native
// protocol), while one relay is killed and restarted every 5 s. Zero
// corrupted transfers; every failed transfer is an error its client sees.
// Short in CI (50 downloads at a time for 20 s); `make chaos` runs the full
// setting (200 at a time for 60 s).
func TestLabChaos(t *testing.T) {
	bins := labBins(t)
	workers, secs := 50, 20
	if os.Getenv("RELAYMESH_CHAOS") == "full" {
		workers, secs = 200, 60
	}
	topo := labTopology(t, `name: e2e-chaos
nodes:
  client: {}
  r1: {role: relay}
  r2: {role: relay}
  r3: {role: relay}
  r4: {role: relay}
  server: {role: server, region: tokyo}
links:
  - {between: [client, r1], rtt_ms: 4, rate_mbit: 100}
  - {between: [client, r2], rtt_ms: 4, rate_mbit: 100}
  - {between: [client, r3], rtt_ms: 4, rate_mbit: 100}
  - {between: [client, r4], rtt_ms: 4, rate_mbit: 100}
  - {between: [r1, r2], rtt_ms: 4, rate_mbit: 100}
  - {between: [r2, r3], rtt_ms: 4, rate_mbit: 100}
  - {between: [r3, r4], rtt_ms: 4, rate_mbit: 100}
  - {between: [r4, r1], rtt_ms: 4, rate_mbit: 100}
  - {between: [r1, server], rtt_ms: 4, rate_mbit: 100}
  - {between: [r2, server], rtt_ms: 4, rate_mbit: 100}
  - {between: [r3, server], rtt_ms: 4, rate_mbit: 100}
  - {between: [r4, server], rtt_ms: 4, rate_mbit: 100}
`)
	st := labUp(t, topo, "e2e-chaos")
	relays := []string{"r1", "r2", "r3", "r4"}
	logDir := t.TempDir()
	start := func(i int) *labpeer.Daemon {
		r, next := relays[i], relays[(i+1)%len(relays)]
		n := st.Nodes[r]
		d, err := labpeer.StartDaemon(n, "relayd", chaosPort, filepath.Join(logDir, r+".log"), -1, -1,
			filepath.Join(bins, "relayd"), "run", "--name", r+"-chaos", "--open", "--allow-private",
			"--socks", fmt.Sprintf("%s:%d", n.Addr, chaosPort), "--http", "", "--admin", "",
			"--relay-listen", fmt.Sprintf("%s:%d", n.Addr, chaosRelayPort),
			"--fleet-secret-file", filepath.Join(st.Dir, "fleet-secret"),
			"--next", fmt.Sprintf("relaymesh://%s:%d", next, chaosRelayPort),
			"--shutdown-grace", "1s", "--log-level", "warn")
		if err != nil {
			t.Fatal(err)
		}
		if err := d.WaitListening(context.Background(), time.Now().Add(10*time.Second), logDir); err != nil {
			t.Fatal(err)
		}
		return d
	}
	daemons := make([]*labpeer.Daemon, len(relays))
	for i := range relays {
		daemons[i] = start(i)
	}
	t.Cleanup(func() {
		labpeer.StopAll(daemons, 5*time.Second, t.Logf)
	})
	var entries []string
	for _, r := range relays {
		entries = append(entries, fmt.Sprintf("%s:%d", st.Nodes[r].Addr, chaosPort))
	}
	runClient := func(workers, secs int) (*exec.Cmd, *limitedBuffer, *limitedBuffer) {
		entriesJSON, _ := json.Marshal(entries)
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		client := exec.Command("ip", "netns", "exec", st.Nodes["client"].Netns, self)
		client.Env = append(os.Environ(), chaosEnv+"=1", "CHAOS_WORKERS="+strconv.Itoa(workers),
			"CHAOS_SECONDS="+strconv.Itoa(secs), "CHAOS_ENTRIES="+string(entriesJSON))
		var out, errOut limitedBuffer
		client.Stdout, client.Stderr = &out, &errOut
		if err := client.Start(); err != nil {
			t.Fatal(err)
		}
		return client, &out, &errOut
	}
	result := func(client *exec.Cmd, out, errOut *limitedBuffer) chaosResult {
		if err := client.Wait(); err != nil {
			t.Fatalf("chaos client: %v\n%s", err, errOut.String())
		}
		var res chaosResult
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("chaos client output: %v\n%s\n%s", err, out.String(), errOut.String())
		}
		return res
	}
	client, out, errOut := runClient(workers, secs)

	// Kill one relay every 5 s (SIGKILL: no drain; the kernel resets its
	// connections), and start it again.
	restarts := 0
	stop := time.Now().Add(time.Duration(secs) * time.Second)
	for i := 0; time.Now().Add(5 * time.Second).Before(stop); i++ {
		time.Sleep(5 * time.Second)
		k := i % len(daemons)
		_ = syscall.Kill(-daemons[k].Cmd.Process.Pid, syscall.SIGKILL)
		<-daemons[k].Done
		daemons[k] = start(k)
		restarts++
	}
	res := result(client, out, errOut)
	t.Logf("%d workers, %d s, %d relay kills: %d transfers ok, %d failed (reported to the client), %d corrupted",
		workers, secs, restarts, res.OK, res.Failed, res.Corrupted)
	for _, e := range res.Errors {
		t.Logf("  %s", e)
	}
	if res.Corrupted != 0 {
		t.Fatalf("%d corrupted transfers", res.Corrupted)
	}
	if restarts == 0 || res.OK == 0 {
		t.Fatalf("%d restarts, %d transfers ok: not a chaos run", restarts, res.OK)
	}
	// The chaos over, every relay carries downloads again, none failing.
	after := result(runClient(len(entries), 3))
	t.Logf("after the chaos: %d ok, %d failed, %d corrupted", after.OK, after.Failed, after.Corrupted)
	if after.Failed != 0 || after.Corrupted != 0 || after.OK < len(entries) {
		t.Fatalf("the relays did not all come back: %+v", after)
	}
}

// limitedBuffer keeps the first 1 MiB written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 1<<20 - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (b *limitedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf...)
}
func (b *limitedBuffer) String() string { return string(b.Bytes()) }
