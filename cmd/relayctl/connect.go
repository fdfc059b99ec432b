package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/chain"
	"github.com/relaymesh/relaymesh/pkg/health"
	"github.com/relaymesh/relaymesh/pkg/survey"
	"github.com/relaymesh/relaymesh/relay"
)

// replanAfterFailureMin spaces re-plans caused by failing tunnels: a dead
// relay fails every tunnel until the registry notices, one survey is enough.
const replanAfterFailureMin = 5 * time.Second

// nextOf is the next-hop URLs of a plan's chain (native protocol).
func (p *planned) nextOf() ([]string, error) {
	var next []string
	for _, name := range p.Result.Best.Chain {
		r, ok := p.Relays[name]
		if !ok || r.Relay == "" {
			return nil, fmt.Errorf("relay %s has no relay listener address in the registry", name)
		}
		next = append(next, "relaymesh://"+r.Relay)
	}
	return next, nil
}

// planRouter sends every tunnel through the current plan's chain and
// re-plans: every interval, and soon after a tunnel fails at a relay. A
// relay blamed for a failure is marked down (left out of plans) and checked
// every health.Watch.Every; it is used again after health.DefaultRise
// passing checks in a row.
type planRouter struct {
	srv   *relay.Server
	plan  func(ctx context.Context, avoid ...string) (*planned, error)
	log   *zap.Logger
	every time.Duration
	watch *health.Watch

	mu       sync.Mutex
	cur      *chain.Chain
	names    []string
	kick     chan struct{}
	lastKick time.Time
}

func (r *planRouter) Route(context.Context, string) (*chain.Chain, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur, nil
}

// Failed is called by the server after a tunnel failed (relay.FailureObserver).
// A broken chain triggers a re-plan; a relay that could not be reached is
// marked down.
func (r *planRouter) Failed(ch *chain.Chain, err error) {
	if r.watch.Failed(ch, err) {
		r.replanSoon(ch, false)
	}
}

// Slow is called when a tunnel on ch is still not up after relay.SlowDial
// (relay.SlowObserver): the chain's relays are checked, and a re-plan
// follows.
func (r *planRouter) Slow(ch *chain.Chain) {
	if len(ch.Hops) == 0 {
		return
	}
	go func() {
		r.watch.Slow(ch, relay.SlowDial)
		r.replanSoon(ch, false)
	}()
}

// replanSoon asks the re-plan loop to plan now, at most every
// replanAfterFailureMin, and only for trouble on the current chain (ch nil:
// any). force skips both checks: a relay went down or came back.
func (r *planRouter) replanSoon(ch *chain.Chain, force bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !force && (ch != r.cur || time.Since(r.lastKick) < replanAfterFailureMin) {
		return
	}
	r.lastKick = time.Now()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// apply plans once, leaving out the relays that are down, and installs the
// chain. The plan is logged when the chain changed, or always with logAll.
func (r *planRouter) apply(ctx context.Context, logAll bool) error {
	avoid := r.watch.DownNames()
	p, err := r.plan(ctx, avoid...)
	if err != nil {
		return err
	}
	next, err := p.nextOf()
	if err != nil {
		return err
	}
	ch, err := r.srv.Chain(next)
	if err != nil {
		return err
	}
	b := p.Result.Best
	if p.Relays != nil {
		r.watch.SetFleet(p.Relays, p.FromHere)
	}
	r.mu.Lock()
	changed := r.cur == nil || strings.Join(r.names, ",") != strings.Join(b.Chain, ",")
	r.cur, r.names = ch, b.Chain
	r.mu.Unlock()
	if changed || logAll {
		r.log.Info("plan", zap.String("dst", p.Result.Destination), zap.Strings("chain", b.Chain),
			zap.Float64("predicted_mbit_s", b.PredictedBps/1e6), zap.Float64("speedup", b.Speedup),
			zap.Strings("down", avoid))
	}
	return nil
}

func (r *planRouter) run(ctx context.Context) {
	go r.watch.Run(ctx)
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		kicked := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.kick:
			kicked = true
			r.log.Info("planning again: a tunnel failed or stalled, or a relay went down or came back")
		}
		pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		if err := r.apply(pctx, kicked); err != nil {
			r.log.Warn("re-plan failed; keeping the current chain", zap.Error(err))
		}
		cancel()
	}
}

func connectCmd() *cobra.Command {
	var f planFlags
	var listen, httpListen, logLevel string
	var every, probeEvery time.Duration
	cfg := relay.Defaults()
	var open bool
	cmd := &cobra.Command{
		Use:   "connect --dst <region|relay|host:port>",
		Short: "Open a local SOCKS5/HTTP proxy that sends every connection through the planned chain",
		Long: `Plan the path to --dst (as relayctl plan does), then serve a local SOCKS5
(--socks) and HTTP proxy (--http) that send every connection through
the planned chain with the native protocol: one authenticated header names
every relay and the destination, over warm relay connections (TLS 1.3, both
ends authenticated with certificates derived from the fleet secret, unless
--transport plain). Point any application at it.

It plans again every --replan, and within seconds when a tunnel fails at a
relay; new connections take the new chain, live ones stay on theirs. A relay
that could not be reached (or, after a tunnel stalled 2 s, fails a check of
its /healthz, or of /v1/info through the relay before it) is marked down:
plans leave it out until 3 checks in a row pass, one every --check-every. A
live tunnel through a relay whose host vanished ends, as an error its client
sees, within the keepalive bound: 10 x --relay-keepalive. The
client is told "succeeded" only once the last relay has reached the
destination. Needs the fleet secret (--fleet-secret-file, or
$RELAYMESH_FLEET_SECRET_FILE, which lab commands set). Stops on SIGINT or
SIGTERM, letting tunnels finish for 5 s.`,
		Example: `  relayctl connect --fleet fleet.yaml --fleet-secret-file fleet.key --dst tokyo
  curl -x socks5h://127.0.0.1:1080 https://example.jp/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			secretFile := f.reg.secretPath()
			if secretFile == "" {
				return errors.New("--fleet-secret-file is required (the relays accept route headers only with the fleet secret)")
			}
			cfg.Transport = f.reg.transport
			log, err := relay.NewLogger(logLevel, "console")
			if err != nil {
				return err
			}
			defer log.Sync() //nolint:errcheck
			cfg.Name, cfg.SOCKS, cfg.HTTP, cfg.Admin = "connect", listen, httpListen, ""
			cfg.FleetSecretFile = secretFile
			// Destinations are checked by the chain's last relay, with its
			// own policy; locally, a direct plan reaches what this host
			// could reach anyway (the listener is loopback unless --socks
			// says otherwise, and then relay.New wants credentials).
			cfg.Policy.AllowPrivate = true
			cfg.Limits.ShutdownGrace = 5 * time.Second
			cfg.Open = open
			srv, err := relay.New(cfg, log.Named("connect"))
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			sv := survey.Survey{AdminToken: f.token(), Admin: f.reg.admin(10 * time.Second)}
			r := &planRouter{srv: srv, plan: f.plan, log: log.Named("plan"), every: every, kick: make(chan struct{}, 1)}
			r.watch = &health.Watch{Every: probeEvery, Check: sv.CheckRelay, Log: r.log,
				OnChange: func() { r.replanSoon(nil, true) }}
			pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			err = r.apply(pctx, true)
			cancel()
			if err != nil {
				return err
			}
			srv.SetRouter(r)
			if err := srv.Start(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "relayctl connect: SOCKS5 on %s, HTTP on %s -> %s via %s\n",
				orNone(srv.SOCKSAddr()), orNone(srv.HTTPAddr()), f.dst, orDirect(r.names))
			go r.run(ctx)
			<-ctx.Done()
			srv.Shutdown(cfg.Limits.ShutdownGrace)
			return nil
		},
	}
	f.register(cmd, false)
	fl := cmd.Flags()
	// The names relayd uses for the same settings; the earlier ones stay as
	// deprecated aliases.
	fl.StringVar(&listen, "socks", "127.0.0.1:1080", `local SOCKS5 listen address ("" disables)`)
	fl.StringVar(&httpListen, "http", "127.0.0.1:8080", `local HTTP proxy listen address ("" disables)`)
	fl.DurationVar(&every, "replan", time.Minute, "plan again this often")
	fl.DurationVar(&probeEvery, "check-every", 2*time.Second, "check a relay marked down this often (relayd: planning.check_every); it is used again after 3 passing checks in a row")
	for old, now := range map[string]string{"listen": "socks", "http-listen": "http", "probe-every": "check-every"} {
		f := *fl.Lookup(now)
		f.Name, f.Shorthand = old, ""
		fl.AddFlag(&f)
		_ = fl.MarkDeprecated(old, "use --"+now+", relayd's name for it")
	}
	fl.DurationVar(&cfg.RelaySocket.KeepAlive, "relay-keepalive", relay.DefaultRelayKeepAlive, "TCP keepalive idle and interval on connections to relays: a relay that vanished mid-stream (host down, path cut) ends the stream within 10 of these")
	fl.BoolVar(&open, "open", false, "allow --socks/--http off loopback without credentials (e.g. in a container whose port only you reach)")
	fl.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
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
