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
	"github.com/relaymesh/relaymesh/pkg/lab"
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
// re-plans: every interval, and soon after a tunnel fails at a relay.
type planRouter struct {
	srv   *relay.Server
	plan  func(context.Context) (*planned, error)
	log   *zap.Logger
	every time.Duration

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
// A failure at a relay (not the destination refusing) triggers a re-plan.
func (r *planRouter) Failed(ch *chain.Chain, err error) {
	var he *chain.HopError
	if !errors.As(err, &he) || he.Hop < 1 || he.Hop > len(ch.Hops) {
		return // direct, or no hop to blame
	}
	// The hop named could not be reached itself, or could not reach the
	// next relay: the chain is broken. The last relay failing to reach
	// the destination is the destination's answer: no re-plan.
	relayDown := he.Target == ch.Hops[he.Hop-1].Addr
	if he.Hop == len(ch.Hops) && !relayDown {
		return
	}
	r.replanSoon(ch)
}

// Slow is called when a tunnel on ch is still not up after relay.SlowDial
// (relay.SlowObserver): a relay that vanished answers nothing at all.
func (r *planRouter) Slow(ch *chain.Chain) {
	if len(ch.Hops) > 0 {
		r.replanSoon(ch)
	}
}

// replanSoon asks the re-plan loop to plan now, at most every
// replanAfterFailureMin, and only for trouble on the current chain.
func (r *planRouter) replanSoon(ch *chain.Chain) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch != r.cur || time.Since(r.lastKick) < replanAfterFailureMin {
		return
	}
	r.lastKick = time.Now()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// apply plans once and installs the chain.
func (r *planRouter) apply(ctx context.Context) error {
	p, err := r.plan(ctx)
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
	r.mu.Lock()
	changed := r.cur == nil || strings.Join(r.names, ",") != strings.Join(b.Chain, ",")
	r.cur, r.names = ch, b.Chain
	r.mu.Unlock()
	if changed {
		r.log.Info("plan", zap.String("dst", p.Result.Destination), zap.Strings("chain", b.Chain),
			zap.Float64("predicted_mbit_s", b.PredictedBps/1e6), zap.Float64("speedup", b.Speedup))
	}
	return nil
}

func (r *planRouter) run(ctx context.Context) {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.kick:
			r.log.Info("a tunnel failed or stalled on the chain: planning again")
		}
		pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		if err := r.apply(pctx); err != nil {
			r.log.Warn("re-plan failed; keeping the current chain", zap.Error(err))
		}
		cancel()
	}
}

func connectCmd() *cobra.Command {
	var f planFlags
	var listen, httpListen, secretFile, logLevel string
	var every time.Duration
	var open bool
	cmd := &cobra.Command{
		Use:   "connect --dst <region|relay|host:port>",
		Short: "Open a local SOCKS5/HTTP proxy that sends every connection through the planned chain",
		Long: `Plan the path to --dst (as relayctl plan does), then serve a local SOCKS5
(--listen) and HTTP proxy (--http-listen) that send every connection through
the planned chain with the native protocol: one authenticated header names
every relay and the destination, over warm relay connections. Point any
application at it.

It plans again every --replan, and within seconds when a tunnel fails at a
relay; new connections take the new chain, live ones stay on theirs. The
client is told "succeeded" only once the last relay has reached the
destination. Needs the fleet secret (--fleet-secret-file, or
$RELAYMESH_FLEET_SECRET_FILE, which lab commands set). Stops on SIGINT or
SIGTERM, letting tunnels finish for 5 s.`,
		Example: `  relayctl connect --fleet fleet.yaml --fleet-secret-file fleet.key --dst tokyo
  curl -x socks5h://127.0.0.1:1080 https://example.jp/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if secretFile == "" {
				secretFile = os.Getenv(lab.EnvFleetSecretFile)
			}
			if secretFile == "" {
				return errors.New("--fleet-secret-file is required (the relays accept route headers only with the fleet secret)")
			}
			log, err := relay.NewLogger(logLevel, "console")
			if err != nil {
				return err
			}
			defer log.Sync() //nolint:errcheck
			cfg := relay.Defaults()
			cfg.Name, cfg.SOCKS, cfg.HTTP, cfg.Admin = "connect", listen, httpListen, ""
			cfg.FleetSecretFile = secretFile
			// Destinations are checked by the chain's last relay, with its
			// own policy; locally, a direct plan reaches what this host
			// could reach anyway (the listener is loopback unless --listen
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
			r := &planRouter{srv: srv, plan: f.plan, log: log.Named("plan"), every: every, kick: make(chan struct{}, 1)}
			pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			err = r.apply(pctx)
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
	fl.StringVar(&listen, "listen", "127.0.0.1:1080", `local SOCKS5 listen address ("" disables)`)
	fl.StringVar(&httpListen, "http-listen", "127.0.0.1:8080", `local HTTP proxy listen address ("" disables)`)
	fl.StringVar(&secretFile, "fleet-secret-file", "", "the fleet secret file (default $"+lab.EnvFleetSecretFile+")")
	fl.DurationVar(&every, "replan", time.Minute, "plan again this often")
	fl.BoolVar(&open, "open", false, "allow --listen/--http-listen off loopback without credentials (e.g. in a container whose port only you reach)")
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
