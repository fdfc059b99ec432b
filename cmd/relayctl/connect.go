package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/planroute"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/rules"
	"github.com/relaymesh/relaymesh/pkg/survey"
	"github.com/relaymesh/relaymesh/planner"
	"github.com/relaymesh/relaymesh/relay"
)

// The server finds the observers by type assertion: a signature that
// drifted would silently stop marking relays down.
var (
	_ interface {
		relay.Router
		relay.FailureObserver
		relay.SlowObserver
	} = (*planroute.Single)(nil)
	_ interface {
		relay.Router
		relay.FailureObserver
		relay.SlowObserver
	} = (*planroute.PerDestination)(nil)
	_ interface {
		relay.Router
		relay.FailureObserver
		relay.SlowObserver
		relay.Refuser
	} = (*rules.Router)(nil)
)

// dstOnlyFlags are the plan flags connect applies only with --dst: a plan
// per destination is made on its own survey (not a matrix file) with
// --max-hops, from this host, any gain over this host's direct path
// winning and ties within the planner's margin (planner.DefaultErrorMargin)
// going to the fewest relays.
var dstOnlyFlags = []string{"matrix", "save-matrix", "from", "direction", "min-gain", "error-margin", "include", "exclude"}

// connectOptions are relayctl connect's own flags, and the relay
// configuration its flags fill in.
type connectOptions struct {
	rules                         rulesFlags
	listen, httpListen, logLevel  string
	every, probeEvery, freshEvery time.Duration
	cfg                           relay.Config
	open, pacFallbackDirect       bool
}

func connectCmd() *cobra.Command { return connectCmdOf(new(planFlags)) }

// connectCmdOf is connectCmd filling in f from its flags: tests read there
// what the flags hand the planner.
func connectCmdOf(f *planFlags) *cobra.Command {
	o := connectOptions{cfg: relay.Defaults()}
	cmd := &cobra.Command{
		Use:   "connect [--dst <region|relay|host:port>]",
		Short: "Open a local SOCKS5/HTTP proxy that sends connections through planned chains",
		Long: `Serve a local SOCKS5 (--socks) and HTTP proxy (--http) that sends connections
through planned chains with the native protocol: one authenticated header
names every relay and the destination, over warm relay connections (TLS 1.3,
both ends authenticated with certificates derived from the fleet secret,
unless --transport plain). Point any application at it: the HTTP listener
serves a PAC file for browsers at http://127.0.0.1:8080/proxy.pac (every
host but loopback to the SOCKS5 listener, then the HTTP one; the same file
relayctl pac --proxy 127.0.0.1:1080 --http-proxy 127.0.0.1:8080 writes), and
eval "$(relayctl env)" points a shell's tools at it (docs/clients.md).

Without --dst, each destination is routed by its own plan. The first
connection to a host starts a survey of it in the background (this host's
RTT to every relay and to the destination, every relay's RTT to it, their
windows) and goes direct at once: no connection waits for a survey. Once the
survey is in, connections to that host take its plan, with this host as the
chain's start and at most --max-hops relays after it; the survey is redone
after --replan, the last plan serving meanwhile. On a fleet that publishes
coordinates (a shortlist survey), a survey again starts from what the last
one learnt (for the 256 hosts surveyed last): it measures the last plan's
chains and what its answer rests on, in about half a fresh survey's rounds
(4 against 8 in the simulator at 1,000 relays); every --fresh-plan-every a
destination is surveyed afresh. A survey serves the host on
every port, and a literal IPv4 address's /24 or IPv6 address's /48: the
first connection's host:port is what is measured for all of them. At most
1024 hosts are kept (the least recently used go) and 4 surveyed at once
(the others go direct until a survey slot frees). Plans are logged when a
host's chain changes. Any gain over this host's direct path wins, and chains
within ` + strconv.FormatFloat(planner.DefaultErrorMargin*100, 'g', -1, 64) + ` % of the fastest go to the fewest relays: --direction, --min-gain,
--error-margin, --include, --exclude and --matrix apply only with --dst.

With --dst, it plans the path to --dst (as relayctl plan does) and sends
every connection, whatever its destination, through that chain. It plans
again every --replan (from the last plan, as above).

With --rules FILE, a rule file decides first, per destination, in the
syntax mihomo/Clash users keep (DOMAIN-SUFFIX,example.jp,CHAIN:tokyo and
the like; docs/rules.md): DIRECT dials from this host, PLAN routes as
above, CHAIN:r1,r2 goes through those relays in order, REJECT refuses
(SOCKS5 reply 0x02, HTTP 403, logged); a destination no line matches takes
the plan. The PAC file served follows the same rules. relayctl rules test
says what the file does with a destination.

A plan that goes direct only because the fleet has not measured itself yet
(no relay's RTT to the destination, none from this host, none between the
relays) says so and is made again ` + planroute.AwaitingReplanEvery.String() + ` later, the wait doubling while
the measurements still have not come, up to --replan.

Both modes plan again within seconds when a tunnel fails at a relay; new
connections take the new chain, live ones stay on theirs. A relay
that could not be reached (or, after a tunnel stalled 2 s, fails a check of
its /healthz, or of /v1/info through the relay before it) is marked down:
plans leave it out until 3 checks in a row pass, one every --check-every. A
live tunnel through a relay whose host vanished ends, as an error its client
sees, within the keepalive bound: 10 x --relay-keepalive.

Plans take what connect's own sockets taught, by remote host: the rate its
sends to a chain's first relay, or to a destination reached directly,
sustained, the share of their bytes sent again, and the largest window a
destination advertised to an upload of 4 MiB or more (docs/planning.md).
--log-level debug logs every plan's segments and notes ("plan details").

SOCKS5 UDP ASSOCIATE is served too (DNS over SOCKS, games, calls): an
association's datagrams take the chain a connection to its first datagram's
destination would take, and the chain's last relay sends them on; it ends
with the client's control connection, or after 60 s without a datagram
(docs/clients.md).

A SOCKS5 client is told "succeeded" at once (optimistic data) and its first
bytes (what it sends within 5 ms) travel with the route header, so a request
reaches the destination one chain round trip sooner: on a 4 x 12.5 ms lab path
the first byte came in 0.7x the direct time, against 1.1x waiting for the
chain. The cost: a chain that then fails resets the client's connection
instead of answering why (logged, with the hop that failed).
--optimistic-data=false answers only once the last relay has reached the
destination. HTTP CONNECT clients always wait. Needs your certificate from the fleet's
operator (--identity-cert, from relayctl ca issue --role client), or in a fleet
that shares a secret the fleet secret (--fleet-secret-file, or
$RELAYMESH_FLEET_SECRET_FILE, which lab commands set). Stops on SIGINT or
SIGTERM, letting tunnels finish for 5 s.`,
		Example: `  # every host by its own plan
  relayctl connect --fleet fleet.yaml --identity-cert ~/.relaymesh/alice.crt
  curl -x socks5h://127.0.0.1:1080 https://example.jp/

  # every connection through the plan to the Tokyo region
  relayctl connect --fleet fleet.yaml --fleet-secret-file fleet.key --dst tokyo

  # every host by its own plan, one TCP connection per relay segment (no striping)
  relayctl connect --fleet fleet.yaml --identity-cert ~/.relaymesh/alice.crt --max-stripes 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, f) },
	}
	f.register(cmd, false)
	f.maxStripesFlag(cmd)
	o.register(cmd)
	return cmd
}

// register adds connect's own flags to cmd, after the plan flags.
func (o *connectOptions) register(cmd *cobra.Command) {
	o.rules.register(cmd)
	fl := cmd.Flags()
	fl.Lookup("dst").Usage = "route every connection by the plan to this region, relay or host:port (default: per destination)"
	// The names relayd uses for the same settings; the earlier ones stay as
	// deprecated aliases.
	fl.StringVar(&o.listen, "socks", "127.0.0.1:1080", `local SOCKS5 listen address ("" disables)`)
	fl.StringVar(&o.httpListen, "http", "127.0.0.1:8080", `local HTTP proxy listen address ("" disables)`)
	fl.DurationVar(&o.every, "replan", time.Minute, "plan again this often (without --dst: survey a destination again when its survey is this old)")
	fl.DurationVar(&o.freshEvery, "fresh-plan-every", survey.DefaultFreshEvery, "survey a destination afresh at least this often, else from the last survey (0: always afresh)")
	fl.DurationVar(&o.probeEvery, "check-every", 2*time.Second, "check a relay marked down this often; 3 passes in a row bring it back")
	for old, now := range map[string]string{"listen": "socks", "http-listen": "http", "probe-every": "check-every"} {
		f := *fl.Lookup(now)
		f.Name, f.Shorthand = old, ""
		fl.AddFlag(&f)
		_ = fl.MarkDeprecated(old, "use --"+now+", relayd's name for it")
	}
	fl.DurationVar(&o.cfg.RelaySocket.KeepAlive, "relay-keepalive", relay.DefaultRelayKeepAlive, "TCP keepalive idle and interval to relays: a vanished relay's streams end within 10 of these")
	fl.BoolVar(&o.open, "open", false, "allow --socks/--http off loopback without credentials (e.g. a container port only you reach)")
	fl.BoolVar(&o.cfg.OptimisticData, "optimistic-data", true, `answer SOCKS5 clients before the chain is up; their first bytes ride the route header`)
	fl.BoolVar(&o.pacFallbackDirect, "pac-fallback-direct", false, "end the PAC file at --http's /proxy.pac with DIRECT: browsers go unproxied if connect is down")
	fl.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
}

// run checks the flags, starts the local proxy and serves until SIGINT or
// SIGTERM: by the plan to --dst, or per destination without it.
func (o *connectOptions) run(cmd *cobra.Command, f *planFlags) error {
	perDest := f.dst == ""
	if perDest {
		if err := checkPerDestinationFlags(cmd, f); err != nil {
			return err
		}
	}
	identity, hasIdentity := f.reg.identityFiles()
	secretFile := f.reg.secretPath()
	if !hasIdentity && secretFile == "" {
		return errors.New("--identity-cert is required (your certificate from the fleet's operator: relayctl ca issue --name YOU --role client), " +
			"or --fleet-secret-file for a fleet that shares a secret: the relays accept route headers only from members of the fleet")
	}
	o.cfg.Transport = f.reg.transport
	log, err := relay.NewLogger(o.logLevel, "console")
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	set, err := o.rules.load(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	srv, err := o.newServer(identity, hasIdentity, secretFile, set, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	sv, pcfg, err := o.planning(f, srv, log)
	if err != nil {
		return err
	}
	if perDest {
		return connectPerDestination(ctx, cmd, srv, f, sv, pcfg, o.every, o.cfg.Limits.ShutdownGrace, set)
	}
	return o.serveDst(ctx, cmd, srv, f, pcfg, set, log)
}

// checkPerDestinationFlags refuses, without --dst, the flags that apply
// only with it, a negative --max-hops and a --max-stripes out of range
// (with --dst, the plan's request checks those).
func checkPerDestinationFlags(cmd *cobra.Command, f *planFlags) error {
	for _, name := range dstOnlyFlags {
		if cmd.Flags().Changed(name) {
			return fmt.Errorf("--%s applies only with --dst (without it, each destination is planned on its own survey)", name)
		}
	}
	if f.maxHops < 0 {
		return fmt.Errorf("--max-hops %d: want 0 (direct only) or more", f.maxHops)
	}
	return f.checkMaxStripes()
}

// newServer is the local proxy, not yet started, serving the PAC file of
// set on its HTTP listener.
func (o *connectOptions) newServer(identity linktls.Files, hasIdentity bool, secretFile string, set *rules.Set, log *zap.Logger) (*relay.Server, error) {
	cfg := &o.cfg
	cfg.Name, cfg.SOCKS, cfg.HTTP, cfg.Admin = "connect", o.listen, o.httpListen, ""
	if hasIdentity {
		// The certificate names this process.
		cfg.Name, cfg.Identity = "", identity
	} else {
		cfg.FleetSecretFile = secretFile
	}
	// Destinations are checked by the chain's last relay, with its
	// own policy; locally, a direct plan reaches what this host
	// could reach anyway (the listener is loopback unless --socks
	// says otherwise, and then relay.New wants credentials).
	cfg.Policy.AllowPrivate = true
	cfg.Limits.ShutdownGrace = 5 * time.Second
	cfg.Open = o.open
	srv, err := relay.New(*cfg, log.Named("connect"))
	if err != nil {
		return nil, err
	}
	srv.SetLocalHandler(connectPAC(srv, o.pacFallbackDirect, set))
	return srv, nil
}

// planning is how connect surveys and plans: f's replans and own
// measurements set, the survey, and the routers' configuration. A
// negative --fresh-plan-every is refused here.
func (o *connectOptions) planning(f *planFlags, srv *relay.Server, log *zap.Logger) (survey.Survey, planroute.Config, error) {
	if o.freshEvery < 0 {
		return survey.Survey{}, planroute.Config{}, fmt.Errorf("--fresh-plan-every %s: want 0 (every plan afresh) or more", o.freshEvery)
	}
	// Replans start from what the last plan of the destination
	// learnt (shortlist surveys only); 0 = never.
	f.replans = &survey.Replans{FreshEvery: o.freshEvery}
	if o.freshEvery == 0 {
		f.replans.FreshEvery = -1
	}
	// Plans take what this process's own sockets taught (its
	// sends to the first relays and to destinations it reaches
	// directly: rate, loss, the destinations' windows).
	f.own = srv.Learnt()
	sv := survey.Survey{AdminToken: f.token(), Admin: f.reg.admin(10 * time.Second), Replans: f.replans, Own: f.own}
	pcfg := planroute.Config{Build: srv.Chain, Check: sv.CheckRelay, CheckEvery: o.probeEvery,
		SlowDial: relay.SlowDial, Log: log.Named("plan")}
	return sv, pcfg, nil
}

// serveDst serves srv routing every connection by the plan to --dst
// until ctx ends: planned once before the listeners open, then again
// every --replan.
func (o *connectOptions) serveDst(ctx context.Context, cmd *cobra.Command, srv *relay.Server, f *planFlags,
	pcfg planroute.Config, set *rules.Set, log *zap.Logger) error {
	r := planroute.NewSingle(pcfg, o.every, f.planRoute)
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err := r.Apply(pctx, true)
	cancel()
	if err != nil {
		return err
	}
	var reg registry.Store
	if set != nil && len(set.Relays()) > 0 {
		// Only CHAIN rules need the registry: the plan to --dst
		// has its relays' addresses.
		if reg, err = f.reg.open(ctx); err != nil {
			return err
		}
	}
	if err := startWithRules(cmd.ErrOrStderr(), srv, set, r, reg, log.Named("rules")); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "relayctl connect: SOCKS5 on %s, HTTP on %s%s -> %s via %s\n",
		orNone(srv.SOCKSAddr()), orNone(srv.HTTPAddr()), pacNote(srv), f.dst, singleVia(r))
	go r.Run(ctx)
	<-ctx.Done()
	srv.Shutdown(o.cfg.Limits.ShutdownGrace)
	return nil
}

// startWithRules routes srv by plan under set's rules (none: by plan
// alone; CHAIN rules find their relays in reg), starts its listeners and
// notes the rules on w: how both of connect's modes start serving, so the
// rules apply from the first connection either way.
func startWithRules(w io.Writer, srv *relay.Server, set *rules.Set, plan relay.Router, reg registry.Store, log *zap.Logger) error {
	router, err := connectRouter(set, plan, srv, reg, log)
	if err != nil {
		return err
	}
	srv.SetRouter(router)
	if err := srv.Start(); err != nil {
		return err
	}
	rulesNote(w, set)
	return nil
}

// singleVia is how connect's start line says r routes: its chain, or
// direct while the measurements it waits for have not come.
func singleVia(r *planroute.Single) string {
	via := orDirect(r.Chain())
	if w := r.Awaiting(); len(w) > 0 {
		via = fmt.Sprintf("direct for now: waiting for measurements (%s); planning again in %v (the wait doubling while they have not come, up to --replan)",
			strings.Join(w, "; "), planroute.AwaitingReplanEvery)
	}
	return via
}

// connectPerDestination serves srv routing each destination by its own
// plan until ctx ends: this host is the survey's client node and the
// chain's start, the user's segment is local (the listeners are this
// host's), and a destination without a plan yet goes direct.
func connectPerDestination(ctx context.Context, cmd *cobra.Command, srv *relay.Server, f *planFlags,
	sv survey.Survey, pcfg planroute.Config, ttl, grace time.Duration, set *rules.Set) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reg, err := f.reg.open(ctx)
	if err != nil {
		return err
	}
	sv.Reg = reg
	sv.Coordinates = survey.CoordinatesOf(reg)
	if sv.Shortlist, err = f.shortlistConfig(); err != nil {
		return err
	}
	if sv.Mode, err = survey.ParseMode(f.survey); err != nil {
		return fmt.Errorf("--survey: %w", err)
	}
	direct, err := srv.Chain(nil)
	if err != nil {
		return err
	}
	r := planroute.NewPerDestination(ctx, f.perDestination(pcfg, sv, ttl, direct))
	defer func() {
		cancel() // ends its surveys and checks, also when Start failed
		r.Wait()
	}()
	if err := startWithRules(cmd.ErrOrStderr(), srv, set, r, reg, pcfg.Log.Named("rules")); err != nil {
		return err
	}
	if set != nil {
		checkChainRelays(ctx, cmd.ErrOrStderr(), set, reg)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "relayctl connect: SOCKS5 on %s, HTTP on %s%s -> each destination by its own plan (direct until surveyed)\n",
		orNone(srv.SOCKSAddr()), orNone(srv.HTTPAddr()), pacNote(srv))
	<-ctx.Done()
	srv.Shutdown(grace)
	return nil
}

// perDestination is how connect without --dst plans each destination:
// on sv's surveys, replanned after ttl, within f's --max-hops and
// --max-stripes, with direct as the fallback.
func (f *planFlags) perDestination(pcfg planroute.Config, sv survey.Survey, ttl time.Duration, direct *chain.Chain) planroute.PerDestinationConfig {
	return planroute.PerDestinationConfig{
		Config: pcfg, Survey: sv.Run, TTL: ttl, MaxHops: f.maxHops, MaxStripes: f.maxStripes,
		// No SurveyWait: an interactive connection never waits for a
		// survey; it goes direct while its destination is surveyed.
		Fallback: func() *chain.Chain { return direct },
	}
}

// planRoute is f.plan as connect's router plans: leaving out the relays
// that are down.
func (f *planFlags) planRoute(ctx context.Context, down []string) (*planroute.Plan, error) {
	p, err := f.plan(ctx, down...)
	if err != nil {
		return nil, err
	}
	return &planroute.Plan{Result: p.Result, Relays: p.Relays, FromHere: p.FromHere, Notes: p.Notes,
		Matrix: p.Matrix, Request: p.Request}, nil
}

func orNone(s string) string {
	if s == "" {
		return "(off)"
	}
	return s
}

func orDirect(chain []string) string {
	if len(chain) == 0 {
		return "direct (no chain beats it)"
	}
	return strings.Join(chain, " -> ")
}

// envOr is the environment variable name's value, or def when it is unset
// or empty (a flag's default that lab commands can set).
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
