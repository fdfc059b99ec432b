// Command relayd is the relaymesh relay daemon.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/buildinfo"
	"github.com/relaymesh/relaymesh/pkg/route"
	"github.com/relaymesh/relaymesh/relay"
)

func main() {
	if err := rootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "relayd:", err)
		os.Exit(1)
	}
}

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "relayd",
		Short: "relaymesh relay: a SOCKS5/HTTP proxy that can hand connections to the next relay",
		Long: `relayd is the relaymesh relay daemon. It accepts SOCKS5 (RFC 1928/1929) and HTTP
proxy clients (CONNECT and absolute-form http://), and reaches each destination
either directly or through a chain of next hops (other relays, or any standard
SOCKS5/HTTP proxy such as dante or squid).

Relays given a registry (--fleet or --consul) measure the RTTs between each
other with TCP handshakes (--probe-mode): mesh probes every peer every 2 s, one
handshake per peer per interval, fine for tens of relays; coordinates spends a
fixed 12 handshakes a minute whatever the fleet size and estimates the rest from
network coordinates. Details: relayd run --help.

relayd check takes run's flags and names every problem that would stop run at
start, without binding or serving (for ExecStartPre and CI).`,
		Version:       buildinfo.Describe(), // --version
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(runCmd(), checkCmd(), healthCmd(), &cobra.Command{
		Use:   "version",
		Short: "Print the version: the release, else dev-<commit>[-dirty] and the commit's time; and the Go version",
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "relayd version", buildinfo.Describe())
		},
	})
	return root
}

// flagOverlay is how each run flag that mirrors a config key applies f's
// value (the flag targets) to cfg (the file's settings); a flag applies
// only when given. Every flag of run is here or in flagsApart
// (TestEveryFlagApplies), so none is silently ignored.
func flagOverlay(f, cfg *relay.Config) map[string]func() {
	return map[string]func(){
		"socks":             func() { cfg.SOCKS = f.SOCKS },
		"http":              func() { cfg.HTTP = f.HTTP },
		"admin":             func() { cfg.Admin = f.Admin },
		"admin-token":       func() { cfg.AdminToken, cfg.AdminTokenFile = f.AdminToken, "" },
		"admin-token-file":  func() { cfg.AdminTokenFile, cfg.AdminToken = f.AdminTokenFile, "" },
		"admin-udp":         func() { cfg.AdminUDP = f.AdminUDP },
		"relay-listen":      func() { cfg.Relay = f.Relay },
		"fleet-secret-file": func() { cfg.FleetSecretFile, cfg.FleetSecret = f.FleetSecretFile, "" },
		"identity-ca":       func() { cfg.Identity.CA = f.Identity.CA },
		"identity-cert":     func() { cfg.Identity.Cert = f.Identity.Cert },
		"identity-key":      func() { cfg.Identity.Key = f.Identity.Key },
		"identity-crl":      func() { cfg.Identity.CRL = f.Identity.CRL },
		"transport":         func() { cfg.Transport = f.Transport },
		"next":              func() { cfg.Next = f.Next },
		"allow-private":     func() { cfg.Policy.AllowPrivate = f.Policy.AllowPrivate },
		"allow":             func() { cfg.Policy.Allow = append(cfg.Policy.Allow, f.Policy.Allow...) },
		"relay-allow":       func() { cfg.Policy.RelayAllow = append(cfg.Policy.RelayAllow, f.Policy.RelayAllow...) },
		"deny":              func() { cfg.Policy.Deny = append(cfg.Policy.Deny, f.Policy.Deny...) },
		"deny-ports":        func() { cfg.Policy.DenyPorts = f.Policy.DenyPorts },
		"open":              func() { cfg.Open = f.Open },
		"optimistic-data":   func() { cfg.OptimisticData = f.OptimisticData },
		"capacity-mbit":     func() { cfg.CapacityMbit = f.CapacityMbit },
		"name":              func() { cfg.Name = f.Name },
		"region":            func() { cfg.Region = f.Region },
		"credentials":       func() { cfg.Auth.CredentialsFile = f.Auth.CredentialsFile },
		"max-conns":         func() { cfg.Limits.MaxConns = f.Limits.MaxConns },
		"max-relay-conns":   func() { cfg.Limits.MaxRelayConns = f.Limits.MaxRelayConns },
		"max-stripes":       func() { cfg.Limits.MaxStripes = f.Limits.MaxStripes },
		"stripe-reorder-bytes": func() {
			cfg.Limits.StripeReorderBytes = f.Limits.StripeReorderBytes
		},
		"max-preauth-conns": func() { cfg.Limits.MaxPreauthConns = f.Limits.MaxPreauthConns },
		"max-preauth-per-source": func() {
			cfg.Limits.MaxPreauthPerSource = f.Limits.MaxPreauthPerSource
		},
		"handshake-timeout": func() { cfg.Limits.HandshakeTimeout = f.Limits.HandshakeTimeout },
		"dial-timeout":      func() { cfg.Limits.DialTimeout = f.Limits.DialTimeout },
		"idle-timeout":      func() { cfg.Limits.IdleTimeout = f.Limits.IdleTimeout },
		"drain-timeout":     func() { cfg.Limits.DrainTimeout = f.Limits.DrainTimeout },
		"shutdown-grace":    func() { cfg.Limits.ShutdownGrace = f.Limits.ShutdownGrace },
		"pool-max-idle":     func() { cfg.Pool.MaxIdle = f.Pool.MaxIdle },
		"pool-idle-timeout": func() { cfg.Pool.IdleTimeout = f.Pool.IdleTimeout },
		"relay-congestion":  func() { cfg.RelaySocket.Congestion = f.RelaySocket.Congestion },
		"routing":           func() { cfg.Routing = f.Routing },
		"log-level":         func() { cfg.Log.Level = f.Log.Level },
		"log-format":        func() { cfg.Log.Format = f.Log.Format },
		"fleet":             func() { cfg.Fleet = f.Fleet },
		"consul":            func() { cfg.Consul.Addr = f.Consul.Addr },
		"consul-token":      func() { cfg.Consul.Token = f.Consul.Token },
		"probe-mode":        func() { cfg.Probe.Mode = f.Probe.Mode },
		"probe-capacity":    func() { cfg.Probe.Capacity = f.Probe.Capacity },
	}
}

// flagsApart are run's flags that are not a config key's overlay: the file
// itself, and client credentials, which become auth.users.
var flagsApart = []string{"config", "user", "password", "help"}

// settings are run's flags, which check takes too: the config file, the
// flags over it, the client credentials. config is the one way from them
// to the relay's Config, so that check checks what run would run.
type settings struct {
	configPath, password string
	f                    relay.Config // flag targets; applied over the file only when set
	users                []string
}

// config reads the file and applies over it the flags given (fl: the
// command's flags), the Consul token's environment variable and the
// client credentials. Validation is the relay's (relay.New, relay.Check).
func (st *settings) config(fl *pflag.FlagSet) (relay.Config, error) {
	cfg := relay.Defaults()
	if st.configPath != "" {
		var err error
		if cfg, err = relay.LoadFile(st.configPath); err != nil {
			return cfg, fmt.Errorf("%s: %w", st.configPath, err)
		}
		cfg.File = st.configPath // its mode is checked when it holds a secret
	}
	for name, apply := range flagOverlay(&st.f, &cfg) {
		if fl.Changed(name) {
			apply()
		}
	}
	if cfg.Consul.Addr != "" && cfg.Consul.Token == "" {
		// The Consul CLI's variable; a flag would show in ps.
		cfg.Consul.Token = os.Getenv("CONSUL_HTTP_TOKEN")
	}
	password := st.password
	if len(st.users) > 0 {
		if password == "" {
			password = os.Getenv("RELAYD_PASSWORD")
		}
		if password == "" {
			return cfg, fmt.Errorf("--user needs a password: --password or the RELAYD_PASSWORD environment variable")
		}
		for _, u := range st.users {
			cfg.Auth.Users = append(cfg.Auth.Users, relay.User{Name: u, Password: password})
		}
	} else if fl.Changed("password") {
		return cfg, fmt.Errorf("--password needs --user")
	}
	return cfg, nil
}

func runCmd() *cobra.Command {
	st := &settings{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the relay",
		Long: `Run the relay until SIGTERM or SIGINT, then stop accepting, let tunnels finish
for the shutdown grace period, and exit 0.

Settings come from --config (YAML; see configs/relayd.example.yaml for every key
and its default), and flags given on the command line override the file.

With $RELAYD_CPU_PROFILE=PATH set, relayd writes a Go CPU profile to PATH.PID
from start to exit (go tool pprof relayd PATH.PID).

With --fleet or --consul the relay measures the RTT to the other relays with
TCP handshakes to their admin ports (--probe-mode; ~450 bytes each):
  mesh         every peer every probe.interval (2 s): one handshake per peer
               per interval, 30 a minute per peer; fine for tens of relays.
  coordinates  probe.per_minute handshakes a minute (12) whatever the fleet
               size, to the probe.nearest (12) peers, probe.per_ring (2) from
               each ring of RTT (below 4 ms, 4-8, 8-16, ... ms) before the
               rest, and probe.random (1) other; the rest is estimated
               from network coordinates, published with the measurements.
               For fleets of hundreds of relays and more.
When a planner asks, the relay measures the capacity of its sends to a peer
with a few UDP trains to the peer's relay port, and lets peers measure theirs
to it (--probe-capacity; at most 3 measurements an hour each way, under 1 MB
of trains an hour in all whatever the fleet size). Off on metered links.

Safe defaults: listeners bind 127.0.0.1; a relay listening on any other address
refuses to start without credentials unless --open is given; destinations in
loopback, private, link-local (cloud metadata), CGNAT, unspecified and the other
special-purpose ranges, and the relay's own addresses, are refused, checked on
the resolved IP at connect time (--allow CIDR opens a range to clients'
destinations, --relay-allow CIDR to relay hops and probes of relays,
--allow-private every range to both, for labs and tests); so is destination
port 25 (--deny-ports). A source that fails to authenticate 10 times is
refused for a minute (limits.max_auth_failures, limits.auth_block).`,
		Example: `  # a local relay on the defaults (SOCKS5 127.0.0.1:1080, HTTP 127.0.0.1:8080, admin 127.0.0.1:9090)
  relayd run
  curl -x socks5h://127.0.0.1:1080 https://example.com/

  # a public relay with credentials, chained through another relay
  RELAYD_PASSWORD=s3cret relayd run --socks 0.0.0.0:1080 --http "" --user alice \
      --next socks5://bob:pw@osaka.example.net:1080

  # a native 3-relay chain: the entry sends one header naming osaka and tokyo
  relayd run --relay-listen :7000 --fleet-secret-file /etc/relaymesh/fleet.key   # on osaka and tokyo
  relayd run --fleet-secret-file /etc/relaymesh/fleet.key \
      --next relaymesh://osaka.example.net:7000 --next relaymesh://tokyo.example.net:7000

  # a relay of a large fleet: a fixed probe budget instead of every peer
  relayd run --config /etc/relayd.yaml --name tokyo --fleet /etc/relaymesh/fleet.yaml --probe-mode coordinates

  # from a config file, one setting overridden
  relayd run --config /etc/relayd.yaml --log-level debug`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := st.config(cmd.Flags())
			if err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			log, err := relay.NewLogger(cfg.Log.Level, cfg.Log.Format)
			if err != nil {
				return err
			}
			defer log.Sync() //nolint:errcheck
			log.Info("relayd starting", zap.String("version", buildinfo.Version()), zap.String("go", runtime.Version()))
			// For finding where a relay's CPU goes (go tool pprof relayd
			// PATH.PID): one file per process, as a bench runs several.
			if path := os.Getenv("RELAYD_CPU_PROFILE"); path != "" {
				pf, err := os.Create(fmt.Sprintf("%s.%d", path, os.Getpid()))
				if err != nil {
					return err
				}
				if err := pprof.StartCPUProfile(pf); err != nil {
					return err
				}
				defer func() { pprof.StopCPUProfile(); pf.Close() }()
			}
			srv, err := relay.New(cfg, log.Named("relayd"))
			if err != nil {
				return err
			}
			// Catch signals before listening: a SIGTERM that arrives once we
			// accept must drain, not kill the process with tunnels open.
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
			if err := srv.Start(); err != nil {
				return err
			}
			got := <-sig
			for got == syscall.SIGHUP {
				switch err := srv.ReloadFleet(); {
				case cfg.Fleet == "":
					log.Info("SIGHUP: no fleet file to re-read (a Consul registry is watched all the time)")
				case err != nil:
					log.Warn("SIGHUP: fleet file not reloaded; keeping the last good one", zap.Error(err))
				default:
					log.Info("SIGHUP: fleet file reloaded", zap.String("fleet", cfg.Fleet))
				}
				got = <-sig
			}
			log.Info("signal received", zap.String("signal", got.String()))
			signal.Stop(sig)
			srv.Shutdown(cfg.Limits.ShutdownGrace)
			return nil
		},
	}
	st.addFlags(cmd.Flags())
	return cmd
}

// checkCmd runs every check run makes before it serves, on the same
// flags, short of binding and serving (relay.Check).
func checkCmd() *cobra.Command {
	st := &settings{}
	var online, strict bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the settings as run would, short of binding and serving; exit 1 naming every problem",
		Long: `Check the settings run would start with (--config and the same flags as run)
and name every problem, not only the first, then exit 1; exit 0 when run would
start. It runs run's own checks, short of binding the listeners and serving:
the config's keys and values; the admin token, credentials, fleet secret and
identity files (readable, long enough, the certificate issued by the CA, for
this relay's name, not revoked); the refusals of an open proxy or admin API;
the relay policy against the first next hop and the fleet file's relays; the
relay sockets' congestion control; whether each listen address can be bound
here (an address this host has, a port below 1024 only with
CAP_NET_BIND_SERVICE). An address already in use shows only when run binds it.

Warnings (a secret file other users may read, an open proxy on purpose, a
certificate expiring within 30 days, fleet file entries left out) are printed
and do not fail the check unless --strict is given.

--online also asks the registry: the Consul agent must answer and let the
token read the measurements; each fleet peer's admin port is dialled (one that
does not answer is a warning).`,
		Example: `  relayd check --config /etc/relaymesh/relayd.yaml
  relayd check --config /etc/relaymesh/relayd.yaml --online --strict`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := st.config(cmd.Flags())
			if err != nil {
				return err
			}
			warnings, err := relay.Check(cfg, online)
			return reportCheck(cmd.OutOrStdout(), cmd.ErrOrStderr(), warnings, err, strict)
		},
	}
	st.addFlags(cmd.Flags())
	cmd.Flags().BoolVar(&online, "online", false, "also ask the registry (the Consul agent, the fleet peers' admin ports)")
	cmd.Flags().BoolVar(&strict, "strict", false, "count warnings as problems")
	return cmd
}

// reportCheck prints check's warnings and problems, one a line, and
// returns an error counting the problems (warnings among them with
// strict).
func reportCheck(stdout, stderr io.Writer, warnings []string, err error, strict bool) error {
	var problems []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		problems = j.Unwrap()
	} else if err != nil {
		problems = []error{err}
	}
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	for _, p := range problems {
		fmt.Fprintln(stderr, "error:", p)
	}
	n := len(problems)
	if strict {
		n += len(warnings)
	}
	if n > 0 {
		return fmt.Errorf("check: %d problem(s)", n)
	}
	fmt.Fprintf(stdout, "relayd check: ok (%d warning(s))\n", len(warnings))
	return nil
}

// addFlags registers run's flags (and check's) on fl.
func (st *settings) addFlags(fl *pflag.FlagSet) {
	st.f.AdminUDP = new(bool)
	fl.StringVarP(&st.configPath, "config", "c", "", "YAML config file (flags override it)")
	fl.StringVar(&st.f.SOCKS, "socks", relay.DefaultSOCKS, `SOCKS5 listen address ("" disables)`)
	fl.StringVar(&st.f.HTTP, "http", relay.DefaultHTTP, `HTTP proxy listen address ("" disables)`)
	fl.StringVar(&st.f.Admin, "admin", relay.DefaultAdmin, `admin listen address: /healthz, /metrics, /v1/info, /v1/measurements, /v1/probe ("" disables)`)
	fl.StringVar(&st.f.AdminToken, "admin-token", "", "bearer token for every admin path but /healthz (needed off loopback; prefer --admin-token-file)")
	fl.StringVar(&st.f.AdminTokenFile, "admin-token-file", "", "file holding the admin token (>= 16 bytes; chmod 600), instead of --admin-token")
	fl.BoolVar(st.f.AdminUDP, "admin-udp", true, "answer planners' probe asks over UDP on the admin port (needs tls, a fleet secret, a token)")
	fl.StringArrayVar(&st.f.Next, "next", nil, "next hop, repeatable, in order: socks5:// or http://[user:pass@]host:port, or relaymesh://host:port")
	fl.StringVar(&st.f.Relay, "relay-listen", "", `native inter-relay listen address, e.g. :7000 (needs an identity or fleet secret; "" disables)`)
	fl.StringVar(&st.f.Identity.CA, "identity-ca", "", "the operator CA's certificate (relayctl ca init): relays and relayctl users are verified against it")
	fl.StringVar(&st.f.Identity.Cert, "identity-cert", "", "this relay's certificate from the operator CA (relayctl ca issue --name NAME); it names the relay")
	fl.StringVar(&st.f.Identity.Key, "identity-key", "", "this relay's private key, from relayctl ca issue (chmod 600)")
	fl.StringVar(&st.f.Identity.CRL, "identity-crl", "", "the operator CA's revocation list (relayctl ca revoke); re-read when it changes")
	fl.StringVar(&st.f.FleetSecretFile, "fleet-secret-file", "", "file of a fleet secret (>= 16 bytes) every relay shares, instead of identities")
	fl.StringVar(&st.f.Transport, "transport", relay.TransportTLS, "relay links and admin API between relays: tls or plain (clear text: trusted networks only)")
	fl.BoolVar(&st.f.Policy.AllowPrivate, "allow-private", false, "allow loopback/private/link-local destinations (labs and tests only)")
	fl.StringArrayVar(&st.f.Policy.Allow, "allow", nil, "CIDR clients' destinations may reach despite the deny list, repeatable (not for relay hops)")
	fl.StringArrayVar(&st.f.Policy.RelayAllow, "relay-allow", nil, "CIDR relay hops and probes may reach despite the deny list, repeatable (not for clients)")
	fl.StringArrayVar(&st.f.Policy.Deny, "deny", nil, "extra CIDR to deny, repeatable")
	fl.IntSliceVar(&st.f.Policy.DenyPorts, "deny-ports", relay.DefaultDenyPorts, "clients' destination ports refused at any address, comma-separated (replaces policy.deny_ports)")
	fl.BoolVar(&st.f.Open, "open", false, "allow listening off loopback without credentials (an open proxy: think twice)")
	fl.Float64Var(&st.f.CapacityMbit, "capacity-mbit", 0, "this relay's capacity, Mbit/s: plans through it never predict more (0: unknown)")
	fl.BoolVar(&st.f.OptimisticData, "optimistic-data", false, `answer SOCKS5 clients before the chain is up; their first bytes ride the route header`)
	fl.StringVar(&st.f.Name, "name", "", "relay name (shown in logs and /v1/info)")
	fl.StringVar(&st.f.Region, "region", "", "region this relay runs in (e.g. tokyo)")
	fl.StringArrayVar(&st.users, "user", nil, "client username (password from --password or $RELAYD_PASSWORD); repeatable, same password")
	fl.StringVar(&st.password, "password", "", "client password for --user (prefer $RELAYD_PASSWORD: flags show in ps)")
	fl.StringVar(&st.f.Auth.CredentialsFile, "credentials", "", `file of "user:password" lines`)
	fl.IntVar(&st.f.Limits.MaxConns, "max-conns", relay.DefaultMaxConns, "concurrent client connections (SOCKS5 and HTTP together); 0: from the file limit")
	fl.IntVar(&st.f.Limits.MaxRelayConns, "max-relay-conns", relay.DefaultMaxConns, "concurrent connections on the relay listener, apart from clients'; 0: from the file limit")
	fl.IntVar(&st.f.Limits.MaxStripes, "max-stripes", route.MaxStripes, "most links a striped segment into this relay may run over; 1: refuse striped segments")
	fl.Int64Var(&st.f.Limits.StripeReorderBytes, "stripe-reorder-bytes", relay.DefaultStripeReorderBytes, "memory all striped streams may hold together (~8.4 MiB each); one beyond it is refused")
	fl.IntVar(&st.f.Limits.MaxPreauthConns, "max-preauth-conns", relay.DefaultMaxPreauthConns, "connections not yet authenticated per client listener; more are closed at once")
	fl.IntVar(&st.f.Limits.MaxPreauthPerSource, "max-preauth-per-source", relay.DefaultMaxPreauthPerSource, "connections not yet authenticated per source address (loopback exempt); more are closed at once")
	fl.DurationVar(&st.f.Limits.HandshakeTimeout, "handshake-timeout", relay.DefaultHandshakeTimeout, "a client must finish its SOCKS5/HTTP request within this")
	fl.DurationVar(&st.f.Limits.DialTimeout, "dial-timeout", relay.DefaultDialTimeout, "time to reach the destination through the whole chain")
	fl.DurationVar(&st.f.Limits.IdleTimeout, "idle-timeout", relay.DefaultIdleTimeout, "close a tunnel silent in both directions this long (0 disables)")
	fl.DurationVar(&st.f.Limits.DrainTimeout, "drain-timeout", relay.DefaultDrainTimeout, "after one side half-closes, close if the other is silent this long (0 disables)")
	fl.DurationVar(&st.f.Limits.ShutdownGrace, "shutdown-grace", relay.DefaultShutdownGrace, "on SIGTERM, how long tunnels may finish before they are closed")
	fl.IntVar(&st.f.Pool.MaxIdle, "pool-max-idle", relay.DefaultPoolMaxIdle, "warm connections kept per peer relay forwarded to (sized by recent use; 0: no warm pools)")
	fl.DurationVar(&st.f.Pool.IdleTimeout, "pool-idle-timeout", relay.DefaultPoolIdleTimeout, "close a warm connection unused this long (keep below the peers' limits.relay_header_wait, 60 s)")
	fl.StringVar(&st.f.Routing, "routing", "static", "static (through --next) or plan (each destination's chain planned from the registry)")
	fl.StringVar(&st.f.RelaySocket.Congestion, "relay-congestion", "", "TCP congestion control to relays (default: bbr if the kernel has it; system: the host's)")
	fl.StringVar(&st.f.Log.Level, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&st.f.Log.Format, "log-format", "console", "console or json")
	fl.StringVar(&st.f.Fleet, "fleet", "", "fleet file: probe every relay listed and share measurements (needs --name; SIGHUP re-reads)")
	fl.StringVar(&st.f.Consul.Addr, "consul", "", "Consul agent HTTP address: register, probe and share measurements there (needs --name)")
	fl.StringVar(&st.f.Consul.Token, "consul-token", "", "Consul ACL token (prefer $CONSUL_HTTP_TOKEN: flags show in ps)")
	fl.StringVar(&st.f.Probe.Capacity, "probe-capacity", relay.CapacityOn, "on or off (metered links): measure this relay's capacity to a peer when a planner asks")
	fl.StringVar(&st.f.Probe.Mode, "probe-mode", relay.DefaultProbeMode, "how peers are probed: mesh (every peer each interval) or coordinates (a few, the rest estimated)")
}

// healthCmd is the container HEALTHCHECK: an image built FROM scratch has no
// shell and no curl, so relayd checks its own admin /healthz.
func healthCmd() *cobra.Command {
	var admin string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Exit 0 if the relay's admin /healthz answers 200 (for container health checks)",
		Example: `  relayd health --admin 127.0.0.1:9090
  HEALTHCHECK CMD ["/relayd", "health"]`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := &http.Client{Timeout: timeout}
			resp, err := c.Get("http://" + admin + "/healthz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s/healthz: %s", admin, resp.Status)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&admin, "admin", relay.DefaultAdmin, "the relay's admin address")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "give up after this long")
	return cmd
}
