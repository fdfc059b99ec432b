package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/serf/coordinate"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/envvar"
	"github.com/relaymesh/relaymesh/pkg/fleet"
	"github.com/relaymesh/relaymesh/pkg/linktls"
	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/survey"
	"github.com/relaymesh/relaymesh/pkg/udpask"
	"github.com/relaymesh/relaymesh/relay"
)

// staleAfter marks measurements older than this in every output: a relay
// refreshes its own every probe interval (2 s) and pulls peers' every 2 s.
const staleAfter = 60 * time.Second

type registryFlags struct {
	fleetPath   string
	consulAddr  string
	consulToken string
	output      string
	secretFile  string
	transport   string
	identity    linktls.Files
}

func (f *registryFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.fleetPath, "fleet", "", "fleet file (default $"+envvar.Fleet+", which relayctl lab sets)")
	cmd.Flags().StringVar(&f.consulAddr, "consul", "", "Consul agent HTTP address to read the fleet from, not a fleet file (default $"+envvar.Consul+")")
	cmd.Flags().StringVar(&f.consulToken, "consul-token", "", "Consul ACL token (default $CONSUL_HTTP_TOKEN; flags show in ps)")
	cmd.Flags().StringVarP(&f.output, "output", "o", "table", "table or json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
	// Checked before anything is read from the network.
	prev := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if f.output != "table" && f.output != "json" {
			return fmt.Errorf("--output %q: want table or json", f.output)
		}
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
	cmd.Flags().StringVar(&f.secretFile, "fleet-secret-file", "", "fleet secret file: its CA verifies the relays (default $"+envvar.FleetSecretFile+")")
	cmd.Flags().StringVar(&f.identity.Cert, "identity-cert", "", "your certificate from the operator CA, not a fleet secret (default $"+envvar.IdentityCert+")")
	cmd.Flags().StringVar(&f.identity.Key, "identity-key", "", "its private key (default: the certificate's file name ending in .key)")
	cmd.Flags().StringVar(&f.identity.CA, "identity-ca", "", "the operator CA's certificate (default: ca.crt beside the certificate)")
	cmd.Flags().StringVar(&f.identity.CRL, "identity-crl", "", "the operator CA's revocation list, if you have it: revoked relays are refused")
	cmd.Flags().StringVar(&f.transport, "transport", envOr(envvar.Transport, relay.TransportTLS), "the relays' transport: tls or plain (default $"+envvar.Transport+", else tls)")
}

// secretPath is the fleet secret file, from the flag or the environment.
func (f *registryFlags) secretPath() string {
	if f.secretFile != "" {
		return f.secretFile
	}
	return os.Getenv(envvar.FleetSecretFile)
}

// adminTLS is how to reach the relays' admin APIs as the fleet runs: over
// HTTPS verified against the fleet CA with transport tls (the config), over
// plain HTTP with transport plain (nil).
func (f *registryFlags) adminTLS() (*tls.Config, error) {
	switch f.transport {
	case relay.TransportPlain:
		return nil, nil
	case relay.TransportTLS:
	default:
		return nil, fmt.Errorf("--transport %q: want tls or plain", f.transport)
	}
	id, err := f.linkIdentity()
	if err != nil {
		return nil, err
	}
	return id.AdminClientConfig(), nil
}

// identityFiles is the relayctl user's identity from an operator CA, from
// the flags or $RELAYMESH_IDENTITY_CERT, its key and the CA found beside
// the certificate unless named; ok is false when none is given.
func (f *registryFlags) identityFiles() (linktls.Files, bool) {
	id := f.identity
	if id.Cert == "" {
		id.Cert = os.Getenv(envvar.IdentityCert)
	}
	if id.Cert == "" {
		return id, false
	}
	if id.Key == "" {
		id.Key = strings.TrimSuffix(id.Cert, filepath.Ext(id.Cert)) + ".key"
	}
	if id.CA == "" {
		id.CA = filepath.Join(filepath.Dir(id.Cert), "ca.crt")
	}
	return id, true
}

// linkIdentity is how relayctl proves itself to relays over TLS: its
// identity from the operator CA, else one derived from the fleet secret.
func (f *registryFlags) linkIdentity() (*linktls.Identity, error) {
	if files, ok := f.identityFiles(); ok {
		return linktls.Load(files)
	}
	path := f.secretPath()
	if path == "" {
		return nil, errors.New("the relays' links and admin APIs take TLS with certificates from the fleet's CA: " +
			"give your certificate from the operator (--identity-cert, or $" + envvar.IdentityCert + "; the operator makes it with relayctl ca issue --role client), " +
			"or for a fleet that shares a secret --fleet-secret-file (or $" + envvar.FleetSecretFile + "), or --transport plain for a fleet whose relays run transport: plain")
	}
	secret, err := (&relay.Config{FleetSecretFile: path}).LoadFleetSecret()
	if err != nil {
		return nil, err
	}
	return linktls.New(secret, "relayctl", linktls.RoleClient)
}

// token is the admin token for the relays' admin APIs: explicit (an
// --admin-token flag) when set, else the fleet file's admin_token, else
// $RELAYMESH_ADMIN_TOKEN.
func (f *registryFlags) token(explicit string) string {
	if explicit != "" {
		return explicit
	}
	path := f.fleetPath
	if path == "" && f.consulAddr == "" {
		path = os.Getenv(envvar.Fleet)
	}
	if path != "" {
		if file, err := fleet.Load(path); err == nil && file.AdminToken != "" {
			return file.AdminToken
		}
	}
	return os.Getenv(envAdminToken)
}

// askKey is the key of probe asks over UDP (pkg/udpask) for a fleet with
// transport tls, derived from the fleet secret and the admin token; nil
// (asks go over HTTPS) without either, or with transport plain.
func (f *registryFlags) askKey(adminToken string) *udpask.Key {
	path := f.secretPath()
	if _, identity := f.identityFiles(); identity || f.transport != relay.TransportTLS || path == "" || adminToken == "" {
		return nil
	}
	secret, err := (&relay.Config{FleetSecretFile: path}).LoadFleetSecret()
	if err != nil {
		return nil
	}
	key, err := udpask.DeriveKey(string(secret), adminToken)
	if err != nil {
		return nil
	}
	return &key
}

// admin reaches the relays' admin APIs (see adminTLS). When that cannot
// be done, every admin request fails with what to do, so that commands
// needing none (a plan on --matrix, say) still work.
func (f *registryFlags) admin(timeout time.Duration) *adminapi.Client {
	conf, err := f.adminTLS()
	if err != nil {
		return adminapi.FailingClient(err)
	}
	return adminapi.NewClient(timeout, conf)
}

// destinations are the regions and relay names of the fleet, sorted, for
// shell completion of --dst: from the fleet file as it is (no relay is
// asked), or from Consul within 2 s. None when the registry cannot be read.
func (f *registryFlags) destinations() []string {
	opts, err := f.options()
	if err != nil {
		return nil
	}
	// Completion needs no admin API: a failing client keeps the fleet
	// secret optional here.
	opts.Admin = adminapi.FailingClient(errors.New("completion reads no admin API"))
	reg, err := registry.Open(opts)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// A fleet file's relays are known once it is read; Consul's only once
	// it is asked. Refresh only when nothing is known yet, so that a fleet
	// file's relays are not asked.
	relays, _ := reg.Relays(ctx)
	if len(relays) == 0 {
		if reg.Refresh(ctx) != nil {
			return nil
		}
		relays, _ = reg.Relays(ctx)
	}
	var out []string
	for _, r := range relays {
		out = append(out, r.Name)
		if r.Region != "" {
			out = append(out, r.Region)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// source is where the registry is read: a Consul agent's address or a
// fleet file, from the flags, then $RELAYMESH_FLEET, then $RELAYMESH_CONSUL
// (a lab whose registry is Consul sets it).
func (f *registryFlags) source() (consulAddr, fleetPath string) {
	consulAddr, fleetPath = f.consulAddr, f.fleetPath
	if consulAddr == "" && fleetPath == "" {
		if fleetPath = os.Getenv(envvar.Fleet); fleetPath == "" {
			consulAddr = os.Getenv(envvar.Consul)
		}
	}
	return consulAddr, fleetPath
}

// id names the registry the flags choose, for bench history lines
// (benchJSON.Registry): "consul:ADDR" or "fleet:ABSOLUTE-PATH"; "" when
// none is chosen.
func (f *registryFlags) id() string {
	consulAddr, fleetPath := f.source()
	switch {
	case fleetPath != "":
		if abs, err := filepath.Abs(fleetPath); err == nil {
			fleetPath = abs
		}
		return "fleet:" + fleetPath
	case consulAddr != "":
		return "consul:" + consulAddr
	}
	return ""
}

// options are the registry the flags choose, checked. Admin is left to
// the caller: only a fleet file's reader needs it.
func (f *registryFlags) options() (registry.Options, error) {
	consulAddr, path := f.source()
	switch {
	case consulAddr != "" && path != "":
		return registry.Options{}, errors.New("--fleet and --consul: give one registry")
	case consulAddr == "" && f.consulToken != "":
		return registry.Options{}, errors.New("--consul-token needs --consul")
	case consulAddr == "" && path == "":
		return registry.Options{}, errors.New("no registry: give --fleet FILE (see configs/fleet.example.yaml) or set $" + envvar.Fleet)
	}
	// An empty token leaves the Consul client's own $CONSUL_HTTP_TOKEN.
	return registry.Options{Fleet: path, Consul: registry.ConsulOptions{Addr: consulAddr, Token: f.consulToken}}, nil
}

// open returns the registry to read, refreshed once.
func (f *registryFlags) open(ctx context.Context) (registry.Registry, error) {
	return f.openRead(ctx, false)
}

// openForPlan is open for a plan: where the registry can (Consul), its
// read returns once the relays and their coordinates are in, and the
// measurements go on being read beside the plan's first probes, within
// ctx (registry.PairsLater).
func (f *registryFlags) openForPlan(ctx context.Context) (registry.Registry, error) {
	return f.openRead(ctx, true)
}

// openRead is open, with the measurements read later where pairsLater
// and the registry can.
func (f *registryFlags) openRead(ctx context.Context, pairsLater bool) (registry.Registry, error) {
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	if opts.Fleet != "" {
		// A fleet file's matrix comes from the relays' admin APIs: when
		// they cannot be reached as the fleet runs, say so once, now,
		// rather than once per relay.
		conf, err := f.adminTLS()
		if err != nil {
			return nil, err
		}
		// A relay whose admin port does not connect within a probe's
		// timeout is down for the plan too: the pull, which waits for
		// every relay, does not wait the rest of its 3 s for it.
		opts.Admin = adminapi.NewClient(3*time.Second, conf).WithConnectTimeout(survey.DefaultTimeout)
	}
	reg, err := registry.Open(opts)
	if err != nil {
		return nil, err
	}
	if fb, ok := reg.(registry.FileBacked); ok {
		for _, e := range fb.Problems() {
			fmt.Fprintf(os.Stderr, "warning: %v (fix the entry; the other relays are used)\n", e)
		}
	}
	if pl, ok := reg.(registry.PairsLater); ok && pairsLater {
		// Its reads time out on their own: the later one outlives
		// this call.
		if err := pl.RefreshBeforePairs(ctx); err != nil {
			return nil, err
		}
		return reg, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := reg.Refresh(ctx); err != nil {
		return nil, err
	}
	return reg, nil
}

func nodesCmd() *cobra.Command {
	var f registryFlags
	var checkUDP bool
	var adminToken string
	var udpWait time.Duration
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List the fleet's relays: region, health, age of their measurements",
		Long: `List the relays of the fleet with their region and health. With a fleet file a
relay is healthy when its admin API answered relayctl, or when a peer's probe
reached it in the last 30 s (relays probe each other; relayctl may not reach
every relay itself). With --consul, healthy means every Consul check of the
relay (its node's and the one on its /healthz) is passing. AGE is the age of
the newest RTT measurement the relay made; COORD the age of the network
coordinate it published (relayd probe.mode coordinates; -o json shows the
coordinate itself).

With --check-udp, relayctl also asks each relay for its windows in one UDP
datagram to its admin port's number, as a plan asks relays for their probes
(relayd admin_udp, on a fleet with transport tls, a fleet secret and an admin
token), and UDP ASK shows the round trip of its answer. A relay that does not
answer is asked over HTTPS by plans, three round trips where UDP takes one:
is UDP to its admin port filtered, or is admin_udp off?`,
		Example: `  relayctl nodes --fleet fleet.yaml
  relayctl nodes --consul 127.0.0.1:8500 --check-udp -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var key *udpask.Key
			if checkUDP {
				if f.transport != relay.TransportTLS {
					return errors.New("--check-udp: relays answer asks over UDP only with transport tls; this fleet runs --transport " + f.transport)
				}
				if key = f.askKey(f.token(adminToken)); key == nil {
					return errors.New("--check-udp: asks over UDP are signed with a key from the fleet secret and the admin token: give --fleet-secret-file (or $" +
						envvar.FleetSecretFile + ") and --admin-token (or the fleet file's admin_token, or $" + envAdminToken + ")")
				}
			}
			reg, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			relays, _ := reg.Relays(cmd.Context())
			pairs, _ := reg.Pairs(cmd.Context())
			now := time.Now()
			coords := map[string]registry.Coordinate{}
			if cs, ok := reg.(registry.Coordinates); ok {
				list, _ := cs.Coordinates(cmd.Context())
				for _, c := range list {
					coords[c.Relay] = c
				}
			}
			type row struct {
				registry.Relay
				AgeS *float64 `json:"age_s"` // newest measurement this relay made; null: none
				// Coordinate is the relay's published network coordinate
				// (serf's, in seconds); null: none.
				Coordinate     *coordinate.Coordinate `json:"coordinate"`
				CoordinateAgeS *float64               `json:"coordinate_age_s"`
				// UDPAsk is the relay's answer to --check-udp: "answered",
				// "no answer", or "no admin address"; absent without it.
				UDPAsk string `json:"udp_ask,omitempty"`
				// UDPAskMs is the round trip of its acknowledgement, ms.
				UDPAskMs *float64 `json:"udp_ask_ms,omitempty"`
			}
			var udpMs map[string]float64
			if key != nil {
				if udpMs, err = checkUDPAsks(cmd.Context(), *key, relays, udpWait); err != nil {
					return err
				}
			}
			var rows []row
			var unanswered []string
			for _, r := range relays {
				rw := row{Relay: r}
				if key != nil {
					switch ms, ok := udpMs[r.Name]; {
					case r.Admin == "":
						rw.UDPAsk = "no admin address"
					case ok:
						rw.UDPAsk, rw.UDPAskMs = "answered", &ms
					default:
						rw.UDPAsk = "no answer"
						if r.Healthy {
							unanswered = append(unanswered, r.Name)
						}
					}
				}
				if c, ok := coords[r.Name]; ok && c.Coord != nil {
					age := math.Round(max(now.Sub(c.UpdatedAt).Seconds(), 0)*10) / 10
					rw.Coordinate, rw.CoordinateAgeS = c.Coord, &age
				}
				for _, p := range pairs {
					if p.From == r.Name {
						age := math.Round(p.Age(now).Seconds()*10) / 10
						if rw.AgeS == nil || age < *rw.AgeS {
							rw.AgeS = &age
						}
					}
				}
				rows = append(rows, rw)
			}
			// After the list, on stderr: which relays plans will ask over
			// HTTPS, and what to look at.
			defer func() {
				if len(unanswered) > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "\nhealthy relays that did not answer an ask over UDP in %s: %d (%s). Plans ask them over HTTPS, three round trips where UDP takes one. "+
						"Is UDP to their admin port's number filtered (a firewall, a security group), or is their admin_udp off?\n",
						udpWait, len(unanswered), namesUpTo(unanswered, 10))
				}
			}()
			if f.output == "json" {
				return writeJSONTo(cmd.OutOrStdout(), map[string]any{"relays": rows})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			head := "NAME\tREGION\tHEALTHY\tSEEN BY\tADMIN\tAGE\tCOORD"
			if key != nil {
				head += "\tUDP ASK"
			}
			fmt.Fprintln(tw, head)
			for _, r := range rows {
				age := "-"
				if r.AgeS != nil {
					age = fmt.Sprintf("%.0fs", *r.AgeS)
					if *r.AgeS > staleAfter.Seconds() {
						age += " (stale)"
					}
				}
				coordAge := "-"
				if r.CoordinateAgeS != nil {
					coordAge = fmt.Sprintf("%.0fs", *r.CoordinateAgeS)
				}
				fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\t%s", r.Name, orDash(r.Region), r.Healthy, r.Health, orDash(r.Admin), age, coordAge)
				switch {
				case r.UDPAskMs != nil:
					fmt.Fprintf(tw, "\t%.1fms", *r.UDPAskMs)
				case key != nil:
					fmt.Fprintf(tw, "\t%s", r.UDPAsk)
				}
				fmt.Fprintln(tw)
			}
			return tw.Flush()
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&checkUDP, "check-udp", false, "ask each relay for its windows in one UDP datagram and show its answer's round trip (UDP ASK)")
	cmd.Flags().DurationVar(&udpWait, "udp-wait", 2*time.Second, "with --check-udp: how long to wait for each relay's answer")
	cmd.Flags().StringVar(&adminToken, "admin-token", "", "with --check-udp: the admin API token (default: the fleet file's, else $"+envAdminToken+")")
	return cmd
}

// namesUpTo joins names, the first n of them and how many more.
func namesUpTo(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

func rttCmd() *cobra.Command {
	var f registryFlags
	cmd := &cobra.Command{
		Use:   "rtt",
		Short: "The RTT matrix the relays measured between each other",
		Long: `Print the RTT matrix: row FROM, column TO, the median of the FROM relay's
recent TCP-handshake probes to TO, in ms. "x" means TO did not answer FROM's
probes (no route, or the host is down); "down" that TO's host answered but its
relay refused the connection (stopped or restarting); "-" that FROM has no
measurement of TO. Values
older than 60 s are marked stale. On a terminal cells are coloured by RTT.
Pairs no relay measured are estimated, marked "~": from the relays' own
network coordinates (probe mode coordinates, which probes a budget of peers
and estimates the rest; fleets of up to 1,000 relays) and, with --consul,
from Consul's coordinates of the relays' nodes.

--output json gives every pair with min, p90, jitter, loss, sample count,
whether it is estimated (a prior, not a probe) and its age.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reg, err := f.open(cmd.Context())
			if err != nil {
				return err
			}
			pairs, _ := reg.Pairs(cmd.Context())
			if rc, ok := reg.(registry.Coordinates); ok {
				coords, _ := rc.Coordinates(cmd.Context())
				var all bool
				if pairs, all = registry.WithEstimates(pairs, coords); !all {
					fmt.Fprintf(cmd.ErrOrStderr(), "note: %d relays have coordinates: pairs no relay measured are not estimated above %d (relayctl plan estimates those it needs)\n", len(coords), registry.MaxEstimatedRelays)
				}
			}
			now := time.Now()
			if f.output == "json" {
				type outPair struct {
					registry.Pair
					AgeS  float64 `json:"age_s"`
					Stale bool    `json:"stale"`
				}
				out := make([]outPair, 0, len(pairs))
				for _, p := range pairs {
					out = append(out, outPair{Pair: p, AgeS: math.Round(p.Age(now).Seconds()*10) / 10, Stale: p.Age(now) > staleAfter})
				}
				return writeJSONTo(cmd.OutOrStdout(), map[string]any{"pairs": out})
			}
			relays, _ := reg.Relays(cmd.Context())
			printMatrix(cmd.OutOrStdout(), relays, pairs, now, colour(cmd.OutOrStdout()))
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

func printMatrix(w io.Writer, relays []registry.Relay, pairs []registry.Pair, now time.Time, colour bool) {
	byPair := map[[2]string]registry.Pair{}
	for _, p := range pairs {
		byPair[[2]string{p.From, p.To}] = p
	}
	// With colour every cell carries escape codes of the same length, so
	// tabwriter (which counts them as width) still aligns the columns.
	plain := func(s string) string {
		if colour {
			return paint("39", s)
		}
		return s
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, plain("FROM \\ TO")+"\t")
	for _, to := range relays {
		fmt.Fprintf(tw, "%s\t", plain(to.Name))
	}
	fmt.Fprintln(tw)
	stale := false
	for _, from := range relays {
		fmt.Fprintf(tw, "%s\t", plain(from.Name))
		for _, to := range relays {
			cell := "-"
			if p, ok := byPair[[2]string{from.Name, to.Name}]; ok {
				switch {
				case p.Loss >= 1:
					cell = "x"
				case !p.Answering():
					cell = "down" // the path answers (RST) but the relay's service does not
				default:
					cell = fmt.Sprintf("%.1f", p.RTTMs)
					if p.Estimated {
						cell = "~" + cell
					}
				}
				if p.Age(now) > staleAfter {
					cell += "*"
					stale = true
				}
				if colour {
					cell = colourRTT(p, cell)
				}
			} else {
				if from.Name == to.Name {
					cell = ""
				}
				cell = plain(cell)
			}
			fmt.Fprintf(tw, "%s\t", cell)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nRTT in ms (median of recent probes); x: no answer; down: the host answers but the relay does not\n(connection refused); ~: estimated; -: not measured.")
	if stale {
		fmt.Fprintf(w, "*: older than %s (stale: the measuring relay may be down or unreachable).\n", staleAfter)
	}
}

// colourRTT grades a cell: green under 50 ms, yellow under 150 ms, red
// above, grey when unreachable or stale.
func colourRTT(p registry.Pair, cell string) string {
	code := "32" // green
	switch {
	case p.Loss >= 1 || p.Age(time.Now()) > staleAfter:
		code = "90"
	case p.RTTMs >= 150:
		code = "31"
	case p.RTTMs >= 50:
		code = "33"
	}
	return paint(code, cell)
}

// paint wraps s in an SGR colour code (two digits) and a reset.
func paint(code, s string) string { return "\x1b[" + code + "m" + s + "\x1b[0m" }

// colour says whether to colour output to w: a terminal, unless
// $NO_COLOR is set (https://no-color.org) or $TERM is dumb.
func colour(w io.Writer) bool {
	return isTerminal(w) && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func writeJSONTo(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
