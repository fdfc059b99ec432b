package relay

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	good := []struct {
		name, yaml string
		check      func(Config) bool
	}{
		{"empty is defaults", "", func(c Config) bool { return c.SOCKS == DefaultSOCKS && c.Limits.MaxConns == DefaultMaxConns }},
		{"durations", "limits: {idle_timeout: 90s, max_conns: 10, handshake_timeout: 1s, dial_timeout: 2s}",
			func(c Config) bool { return c.Limits.IdleTimeout == 90*time.Second && c.Limits.MaxConns == 10 }},
		{"next and policy", "next: [socks5://a:1, http://u:p@b:2]\npolicy: {allow: [10.0.0.0/8]}",
			func(c Config) bool { return len(c.Next) == 2 && c.Policy.Allow[0] == "10.0.0.0/8" }},
		{"fleet and probe", "name: tokyo\nfleet: /etc/fleet.yaml\nprobe: {interval: 1s, window: 60}",
			func(c Config) bool {
				return c.Fleet == "/etc/fleet.yaml" && c.Probe.Window == 60 && c.Probe.Timeout == DefaultProbeTimeout
			}},
		{"probe mode mesh by default", "",
			func(c Config) bool {
				return c.Probe.Mode == ProbeMesh && c.Probe.PerMinute == 12 && c.Probe.Nearest == 12 && c.Probe.Random == 1
			}},
		{"probe mode coordinates", "probe: {mode: coordinates, per_minute: 30, nearest: 5}",
			func(c Config) bool {
				cc := c.Probe.coordConfig()
				return c.Probe.Mode == ProbeCoordinates && cc.ProbesPerMinute == 30 && cc.Nearest == 5 && cc.Random == 1 &&
					c.Probe.Timeout == DefaultProbeTimeout
			}},
		{"no shortcuts by default", "probe: {mode: coordinates}",
			func(c Config) bool { return c.Probe.coordConfig().Shortcuts == 0 }},
		{"shortcuts on request", "probe: {mode: coordinates, shortcuts: 16}",
			func(c Config) bool {
				cc, err := c.Probe.coordConfig().WithDefaults()
				return err == nil && cc.Shortcuts == 16
			}},
		{"two nearest peers a ring by default", "probe: {mode: coordinates}",
			func(c Config) bool {
				cc, err := c.Probe.coordConfig().WithDefaults()
				return err == nil && cc.PerRing == 2
			}},
		{"no rings on request", "probe: {mode: coordinates, per_ring: -1}",
			func(c Config) bool {
				cc, err := c.Probe.coordConfig().WithDefaults()
				return err == nil && cc.PerRing == -1
			}},
		{"a fast budget", "probe: {mode: coordinates, per_minute: 6000}",
			func(c Config) bool { return c.Probe.coordConfig().Interval() == 10*time.Millisecond }},
		{"capacity probe on by default", "", func(c Config) bool { return c.Probe.Capacity == CapacityOn }},
		{"capacity probe off", "probe: {capacity: off}", func(c Config) bool { return c.Probe.Capacity == CapacityOff }},
		{"capacity probe on", "probe: {capacity: on}", func(c Config) bool { return c.Probe.Capacity == CapacityOn }},
	}
	for _, tc := range good {
		c, err := Parse([]byte(tc.yaml))
		if err == nil {
			err = c.Validate()
		}
		if err != nil || !tc.check(c) {
			t.Errorf("%s: %v %+v", tc.name, err, c)
		}
	}
	bad := []struct{ name, yaml, want string }{
		{"unknown key", "sock: 1.2.3.4:1", "field sock not found"},
		{"unknown nested key", "limits: {max_con: 3}", "max_con"},
		{"bad next", "next: [ftp://x:1]", "next[0]"},
		{"bad cidr", "policy: {allow: [10.0.0.0]}", "policy.allow[0]"},
		{"bad relay cidr", "policy: {relay_allow: [10.0.0.0/40]}", "policy.relay_allow[0]"},
		{"bad level", "log: {level: loud}", "log.level"},
		{"negative pool", "pool: {max_idle: -1}", "pool.max_idle"},
		{"pool outlives header wait", "pool: {idle_timeout: 90s}", "pool.idle_timeout: 1m30s must be below limits.relay_header_wait 1m0s"},
		{"bad congestion", "relay_socket: {congestion: BBR!}", "relay_socket.congestion"},
		{"no links", "limits: {max_stripes: 0}", "limits.max_stripes"},
		{"too many links", "limits: {max_stripes: 9}", "limits.max_stripes"},
		{"stripe budget below one stream", "limits: {stripe_reorder_bytes: 1048576}", "limits.stripe_reorder_bytes: must hold one striped stream of limits.max_stripes (8) links"},
		{"huge buffer", "relay_socket: {recv_buffer_bytes: 2147483647}", "relay_socket.recv_buffer_bytes"},
		{"no front end", "socks: ''\nhttp: ''", "at least one front end"},
		{"zero handshake", "limits: {handshake_timeout: 0s}", "limits.handshake_timeout"},
		{"no stranger conns", "limits: {max_preauth_conns: 0}", "limits.max_preauth_conns: must be at least 1, got 0"},
		{"no stranger conns per source", "limits: {max_preauth_per_source: -1}", "limits.max_preauth_per_source: must be at least 1, got -1"},
		{"half user", "auth: {users: [{user: a}]}", "auth.users[0]"},
		{"bad listen", "socks: nonsense", "socks:"},
		{"fleet without name", "fleet: /etc/fleet.yaml", "name: required with fleet"},
		{"two registries", "name: a\nfleet: /f.yaml\nconsul: {addr: 127.0.0.1:8500}", "choose one registry"},
		{"consul without name", "consul: {addr: 127.0.0.1:8500}", "name: required with consul"},
		{"consul without admin", "name: a\nadmin: ''\nconsul: {addr: 127.0.0.1:8500}", "admin: required with consul"},
		{"token without consul", "consul: {token: t}", "consul.token"},
		{"probe window", "probe: {window: 0}", "probe.window"},
		{"probe interval", "probe: {interval: 0s}", "probe.interval"},
		{"probe mode", "probe: {mode: ring}", `probe.mode: "ring" is not mesh`},
		{"no budget", "probe: {mode: coordinates, per_minute: 0}", "probe.per_minute: must be 1..6000 handshakes a minute, got 0"},
		{"budget past 1 a 10 ms", "probe: {per_minute: 6001}", "probe.per_minute: must be 1..6000"},
		{"no nearest", "probe: {mode: coordinates, nearest: 0}", "probe.nearest: must be 1..1000 peers, got 0"},
		{"negative random", "probe: {mode: coordinates, random: -1}", "probe.random: must be 1..1000 peers, got -1"},
		{"negative shortcuts", "probe: {mode: coordinates, shortcuts: -1}", "probe.shortcuts: must be 0..1000 peers (0: none), got -1"},
		{"no peer a ring", "probe: {mode: coordinates, per_ring: 0}", "probe.per_ring: must be 1..1000 peers a ring of RTT, or -1 for no rings, got 0"},
		{"a set too slow to go round", "probe: {mode: coordinates, per_minute: 1}",
			"probe.per_minute, probe.nearest, probe.random: going round 13 peers at 1 a minute takes 13m0s"},
		{"per_minute misspelt", "probe: {per_minut: 3}", "per_minut"},
		{"capacity probe neither on nor off", "probe: {capacity: metered}", `probe.capacity: want on or off (metered links), got "metered"`},
		{"capacity probe as a boolean", "probe: {capacity: false}", `probe.capacity: want on or off (metered links), got "false"`},
	}
	for _, tc := range bad {
		c, err := Parse([]byte(tc.yaml))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestExampleConfigIsValid(t *testing.T) {
	c, err := LoadFile("../configs/relayd.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// The example documents the defaults: they must be the real ones.
	d := Defaults()
	if c.Limits != d.Limits || c.SOCKS != d.SOCKS || c.HTTP != d.HTTP || c.Admin != d.Admin || c.Log != d.Log || c.Probe != d.Probe {
		t.Fatalf("example config disagrees with Defaults():\n%+v\n%+v", c, d)
	}
}

func TestCredentialsFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "creds")
	_ = os.WriteFile(p, []byte("# users\nalice:pw1\n\nbob:p:w:2\n"), 0o600)
	c := Defaults()
	c.Auth.CredentialsFile = p
	users, err := c.LoadCredentials()
	if err != nil || users["alice"] != "pw1" || users["bob"] != "p:w:2" {
		t.Fatalf("%v %v", users, err)
	}
	_ = os.WriteFile(p, []byte("alice-secret-no-colon\n"), 0o600)
	_, err = c.LoadCredentials()
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("bad line: %v (must not echo the line)", err)
	}
	cr := newCredentials(map[string]string{"alice": "pw1"}, nil)
	if !cr.check("alice", "pw1") || cr.check("alice", "pw2") || cr.check("bob", "pw1") {
		t.Fatal("credential check")
	}
}

func FuzzParseConfig(f *testing.F) {
	data, _ := os.ReadFile("../configs/relayd.example.yaml")
	f.Add(data)
	f.Add([]byte("next: [socks5://a:1]\nlimits: {idle_timeout: 1s}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err == nil {
			_ = c.Validate()
		}
	})
}

func TestRelaySocketCongestionChecked(t *testing.T) {
	// reno is always built into Linux; a made-up name is refused at start
	// with a pointer to the sysctl that lists what is available.
	if err := (SocketConfig{Congestion: "reno", RecvBufferBytes: 1 << 20}).checkCongestion(); err != nil {
		t.Fatalf("reno: %v", err)
	}
	err := (SocketConfig{Congestion: "nosuchcc"}).checkCongestion()
	if err == nil || !strings.Contains(err.Error(), "tcp_available_congestion_control") {
		t.Fatalf("nosuchcc: %v", err)
	}
}

func TestExposedSecretFiles(t *testing.T) {
	dir := t.TempDir()
	open, closed := filepath.Join(dir, "open"), filepath.Join(dir, "closed")
	if err := os.WriteFile(open, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(closed, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Config{FleetSecretFile: open, Fleet: closed}
	got := c.ExposedSecretFiles()
	if len(got) != 1 || !strings.Contains(got[0], "fleet_secret_file") || !strings.Contains(got[0], "chmod 600") {
		t.Fatalf("got %q, want one warning for the 0644 fleet secret file", got)
	}
}

// What Marshal writes, Parse reads back unchanged: the lab writes relayd's
// configs this way, so a renamed or retyped key fails to compile there.
func TestMarshalRoundTrips(t *testing.T) {
	c := Defaults()
	c.Name, c.Region, c.Open = "r1", "tokyo", true
	c.Next = []string{"relaymesh://10.0.0.2:7000"}
	c.Probe.PullInterval = 2 * time.Second
	c.Policy.Allow = []string{"10.77.0.0/16"}
	c.Auth.Users = []User{{Name: "alice", Password: "pw"}}
	c.RelaySocket.KeepAlive = 1500 * time.Millisecond
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "pull_interval: 2s") {
		t.Errorf("durations are not written as durations:\n%s", data)
	}
	back, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := c.Marshal()
	b, _ := back.Marshal()
	if string(a) != string(b) {
		t.Fatalf("round trip changed the config:\n%s\n---\n%s", a, b)
	}
}

// Overlay replaces only what it names, section keys one by one, and
// refuses an unknown key.
func TestOverlay(t *testing.T) {
	c := Defaults()
	c.Probe.PullInterval = 2 * time.Second
	if err := c.Overlay([]byte("probe: {window: 5}\nname: x")); err != nil {
		t.Fatal(err)
	}
	if c.Probe.Window != 5 || c.Probe.PullInterval != 2*time.Second || c.Name != "x" {
		t.Fatalf("overlay: %+v", c.Probe)
	}
	if err := c.Overlay([]byte("probe: {windw: 5}")); err == nil || !strings.Contains(err.Error(), "windw") {
		t.Fatalf("unknown key: %v", err)
	}
}

// The config file is checked too when it sets a secret itself, and so is
// admin_token_file. The config file used to go unchecked, and the admin
// token could only be in it or on the command line.
func TestExposedConfigAndTokenFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secret := write("secret.yaml", "admin_token: 0123456789abcdef0123\n", 0o644)
	plain := write("plain.yaml", "name: tokyo\n", 0o644)
	closed := write("closed.yaml", "auth: {users: [{user: a, password: b}]}\n", 0o600)
	token := write("token", "0123456789abcdef0123\n", 0o640)
	for _, tc := range []struct {
		c    Config
		want []string
	}{
		{Config{File: secret}, []string{"config file (it sets a secret) " + secret}},
		{Config{File: plain}, nil},
		{Config{File: closed}, nil},
		{Config{AdminTokenFile: token}, []string{"admin_token_file " + token}},
	} {
		got := tc.c.ExposedSecretFiles()
		if len(got) != len(tc.want) {
			t.Errorf("%+v: got %q, want %q", tc.c, got, tc.want)
			continue
		}
		for i := range got {
			if !strings.HasPrefix(got[i], tc.want[i]) || !strings.Contains(got[i], "chmod 600") {
				t.Errorf("%+v: got %q, want %q...", tc.c, got[i], tc.want[i])
			}
		}
	}
	c := Config{AdminTokenFile: token}
	if err := c.LoadAdminToken(); err != nil || c.AdminToken != "0123456789abcdef0123" {
		t.Fatalf("LoadAdminToken: %q, %v", c.AdminToken, err)
	}
	short := write("short", "0123456789abcde\n", 0o600)
	c = Config{AdminTokenFile: short}
	if err := c.LoadAdminToken(); err == nil || strings.Contains(err.Error(), "0123456789abcde") {
		t.Fatalf("a 15-byte token: %v, want an error that does not echo it", err)
	}
	c = Defaults()
	c.AdminToken, c.AdminTokenFile = "0123456789abcdef0123", token
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "admin_token, admin_token_file") {
		t.Fatalf("both set: %v", err)
	}
}

// Relay links send with BBR unless the config says otherwise, where the
// kernel lets this process use it; "system" is the host's default.
func TestRelaySocketCongestionDefault(t *testing.T) {
	bbrOK := (SocketConfig{Congestion: "bbr"}).checkCongestion() == nil
	for _, tc := range []struct{ set, want string }{
		{"", map[bool]string{true: "bbr", false: ""}[bbrOK]},
		{CongestionSystem, ""},
		{"reno", "reno"},
	} {
		sc := SocketConfig{Congestion: tc.set}
		sc.resolveCongestion()
		if sc.Congestion != tc.want {
			t.Errorf("congestion %q resolves to %q, want %q (bbr available: %v)", tc.set, sc.Congestion, tc.want, bbrOK)
		}
	}
}
