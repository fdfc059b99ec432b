// Command coordscale measures what a user of a fleet in probe mode
// coordinates sees of it as it starts: it runs -relays relayd processes on
// loopback (relay i on ports 21000+i, 22000+i and 23000+i of 127.0.0.1,
// TLS links and admin APIs from one fleet
// secret, a fleet file, the default probe budget), and at each of -at after
// the last one started runs `relayctl rtt -o json` and counts the ordered
// pairs it gives an RTT for, measured (a probe) or estimated (the relays'
// coordinates). It prints a Markdown table.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	n := flag.Int("relays", 100, "relays to run")
	relayd := flag.String("relayd", "bin/relayd", "relayd binary")
	relayctl := flag.String("relayctl", "bin/relayctl", "relayctl binary")
	at := flag.String("at", "30s,60s,90s,120s,180s", "when to read the matrix, after the last relay started")
	flag.Parse()
	if *n < 2 || *n > 999 {
		fail(fmt.Errorf("-relays %d: want 2 to 999", *n))
	}
	var marks []time.Duration
	for _, s := range strings.Split(*at, ",") {
		d, err := time.ParseDuration(s)
		if err != nil {
			fail(fmt.Errorf("-at %q: %w", s, err))
		}
		marks = append(marks, d)
	}
	if err := run(*n, *relayd, *relayctl, marks, os.Stdout); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "coordscale:", err)
	os.Exit(1)
}

func run(n int, relayd, relayctl string, marks []time.Duration, w io.Writer) error {
	dir, err := os.MkdirTemp("", "coordscale")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	secret, token := randomHex(32), randomHex(16)
	secretFile, fleetFile, cfgFile := filepath.Join(dir, "fleet.key"), filepath.Join(dir, "fleet.yaml"), filepath.Join(dir, "relayd.yaml")
	var fleet strings.Builder
	fmt.Fprintf(&fleet, "admin_token: %s\nrelays:\n", token)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&fleet, "  - {name: r%d, region: reg%d, admin: %s, relay: %s}\n", i, i, addr(adminPort, i), addr(relayPort, i))
	}
	for path, body := range map[string]string{
		secretFile: secret + "\n",
		fleetFile:  fleet.String(),
		cfgFile:    "probe: {mode: coordinates}\nfleet: " + fleetFile + "\n",
	} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			return err
		}
	}
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()
	for i := 1; i <= n; i++ {
		cmd := exec.Command(relayd, "run", "--config", cfgFile, "--name", fmt.Sprintf("r%d", i),
			"--socks", addr(socksPort, i), "--http", "", "--admin", addr(adminPort, i), "--relay-listen", addr(relayPort, i),
			"--admin-token", token, "--fleet-secret-file", secretFile, "--allow-private", "--log-level", "error")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		procs = append(procs, cmd)
	}
	for i := 1; i <= n; i++ {
		if err := waitListening(addr(adminPort, i), 20*time.Second); err != nil {
			return fmt.Errorf("relay r%d: %w", i, err)
		}
	}
	started := time.Now()
	fmt.Fprintf(w, "| after start | measured | estimated | with an RTT | of %d ordered pairs |\n|---|---|---|---|---|\n", n*(n-1))
	for _, m := range marks {
		time.Sleep(time.Until(started.Add(m)))
		measured, estimated, err := readMatrix(relayctl, fleetFile, secretFile)
		if err != nil {
			return err
		}
		total := float64(n * (n - 1))
		fmt.Fprintf(w, "| %v | %.1f %% | %.1f %% | %.1f %% | %d |\n", m, 100*float64(measured)/total, 100*float64(estimated)/total,
			100*float64(measured+estimated)/total, measured+estimated)
	}
	return nil
}

// readMatrix counts the pairs relayctl rtt gives an RTT for: measured
// (answered probes) and estimated.
func readMatrix(relayctl, fleetFile, secretFile string) (measured, estimated int, err error) {
	out, err := exec.Command(relayctl, "rtt", "-o", "json", "--fleet", fleetFile, "--fleet-secret-file", secretFile).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("relayctl rtt: %w", err)
	}
	var m struct {
		Pairs []struct {
			RTTMs     float64 `json:"rtt_ms"`
			Loss      float64
			Estimated bool
		}
	}
	if err := json.Unmarshal(out, &m); err != nil {
		return 0, 0, err
	}
	for _, p := range m.Pairs {
		switch {
		case p.Estimated:
			estimated++
		case p.Loss < 1 && p.RTTMs > 0:
			measured++
		}
	}
	return measured, estimated, nil
}

// Relay i listens on these ports plus i, on 127.0.0.1 (relayd binds only
// addresses an interface has): up to 999 relays.
const (
	socksPort = 21000
	adminPort = 22000
	relayPort = 23000
)

func addr(base, i int) string { return fmt.Sprintf("127.0.0.1:%d", base+i) }

func waitListening(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
