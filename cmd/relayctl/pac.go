package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/relaymesh/relaymesh/pkg/rules"
	"github.com/relaymesh/relaymesh/relay"
)

// pacPath is where connect's HTTP listener and relayctl pac --serve serve
// the PAC file.
const pacPath = "/proxy.pac"

// pacContentType is the MIME type browsers expect of a PAC file.
const pacContentType = "application/x-ns-proxy-autoconfig"

// loopback is what never goes through a proxy: each entry as NO_PROXY
// names it (relayctl env) and as a PAC condition on host. One list, so
// the shell and the browser leave out the same hosts.
var loopback = []struct{ noProxy, pac string }{
	{"localhost", `host == "localhost" || shExpMatch(host, "*.localhost")`},
	// A regular expression, not isInNet: isInNet resolves a name locally.
	{"127.0.0.0/8", `/^127\.\d+\.\d+\.\d+$/.test(host)`},
	{"::1", `host == "::1" || host == "[::1]"`},
}

// pacRejectProxy is a PAC file's answer for REJECT rules: a proxy nothing
// listens at (the discard port on the browser's own loopback), so the
// browser fails the request at once, sends it nowhere and resolves
// nothing; never followed by DIRECT, which would let it around the rule.
const pacRejectProxy = "PROXY 127.0.0.1:9"

// pacSpec is what a PAC file says. The text is a function of it alone
// (writePAC): relayctl pac and connect's /proxy.pac write the same file
// for the same spec.
type pacSpec struct {
	// Header are comment lines put first (the plan it was made from).
	Header []string
	// Hosts are shExpMatch patterns that take the proxies; none: every
	// host. Loopback is always direct.
	Hosts []string
	// SOCKS is a SOCKS5 front end (host:port), HTTP an HTTP proxy's; ""
	// leaves it out. Neither: every host direct (a direct plan).
	SOCKS, HTTP string
	// FallbackDirect appends DIRECT: when the proxies are down the
	// browser goes direct, around the relays, instead of failing.
	FallbackDirect bool
	// Rules, when set, decide instead of Hosts (loopback still goes
	// direct first): DIRECT rules DIRECT, PLAN and CHAIN rules and hosts
	// no rule matches the proxies, REJECT rules pacRejectProxy.
	Rules *rules.Set
}

// proxies is the PAC answer for the hosts that take the proxies: only
// SOCKS5 (names reach the proxy, which resolves them) and PROXY entries;
// never SOCKS (version 4), which the relays do not speak.
func (s pacSpec) proxies() string {
	var p []string
	if s.SOCKS != "" {
		p = append(p, "SOCKS5 "+s.SOCKS)
	}
	if s.HTTP != "" {
		p = append(p, "PROXY "+s.HTTP)
	}
	if len(p) == 0 {
		return "DIRECT"
	}
	if s.FallbackDirect {
		p = append(p, "DIRECT")
	}
	return strings.Join(p, "; ")
}

// validate refuses what would break out of a PAC string or comment.
func (s pacSpec) validate() error {
	for _, a := range []struct{ flag, addr string }{{"--proxy", s.SOCKS}, {"--http-proxy", s.HTTP}} {
		if a.addr == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a.addr); err != nil || port == "" || strings.ContainsAny(a.addr, " ;\"'\\\n\r\t") {
			return fmt.Errorf("%s %q: want host:port", a.flag, a.addr)
		}
	}
	if s.Rules != nil && len(s.Hosts) > 0 {
		return errors.New("--hosts and --rules: choose one (the rules say which hosts take the proxy)")
	}
	for _, h := range s.Hosts {
		if h == "" || strings.ContainsFunc(h, func(r rune) bool { return r < 0x21 || r == 0x7f }) {
			return fmt.Errorf("--hosts %q: want a shExpMatch pattern without spaces or control characters, e.g. '*.jp'", h)
		}
	}
	return nil
}

// describe is the comment line that says what the file routes.
func (s pacSpec) describe() string {
	if s.SOCKS == "" && s.HTTP == "" {
		return "every host direct"
	}
	which := "every host but loopback"
	switch {
	case s.Rules != nil:
		which = "by the rules of " + s.Rules.File + " (DIRECT rules direct, REJECT rules " + strconv.Quote(pacRejectProxy) + "), the rest"
	case len(s.Hosts) > 0:
		which = "hosts matching " + strings.Join(s.Hosts, ", ")
	}
	fallback := "no DIRECT fallback: when the proxy is down they fail instead of going around it"
	if s.FallbackDirect {
		fallback = "DIRECT when the proxy is down: they then go around it"
	}
	return which + " -> " + strconv.Quote(s.proxies()) + " (" + fallback + ")"
}

// writePAC writes the PAC file of s.
func writePAC(w io.Writer, s pacSpec) {
	for _, h := range append(append([]string{}, s.Header...), "relaymesh PAC: "+s.describe()) {
		fmt.Fprintf(w, "// %s\n", strings.NewReplacer("\n", " ", "\r", " ").Replace(h))
	}
	withRules := s.Rules != nil && s.proxies() != "DIRECT"
	if withRules {
		_ = s.Rules.WritePAC(w) // w's errors are the caller's to see
	}
	fmt.Fprintln(w, "function FindProxyForURL(url, host) {")
	answer := s.proxies()
	if answer != "DIRECT" {
		var local []string
		for _, l := range loopback {
			local = append(local, l.pac)
		}
		fmt.Fprintf(w, "  if (%s)\n    return \"DIRECT\";\n", strings.Join(local, " ||\n      "))
		if withRules {
			fmt.Fprintf(w, "  switch (relaymeshAction(url, host)) {\n  case %q:\n    return \"DIRECT\";\n  case %q:\n    return %q;\n  }\n",
				rules.PACDirect, rules.PACReject, pacRejectProxy)
		}
		if len(s.Hosts) > 0 {
			var conds []string
			for _, p := range s.Hosts {
				conds = append(conds, "shExpMatch(host, "+strconv.QuoteToASCII(p)+")")
			}
			fmt.Fprintf(w, "  if (%s)\n    return %s;\n", strings.Join(conds, " || "), strconv.Quote(answer))
			answer = "DIRECT"
		}
	}
	fmt.Fprintf(w, "  return %s;\n", strconv.Quote(answer))
	fmt.Fprintln(w, "}")
}

// pacHandler serves the PAC file of spec(the address the request came
// in on) at pacPath, GET and HEAD only. A proxy listening on an
// unspecified address (0.0.0.0:1080) is named in the file by the address
// the browser reached this server on. The file holds addresses, never
// credentials: it is safe on a listener strangers reach.
func pacHandler(spec func() pacSpec) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != pacPath {
			http.Error(w, "relaymesh: not found; the PAC file is at "+pacPath, http.StatusNotFound)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "relaymesh: method not allowed", http.StatusMethodNotAllowed)
			return
		}
		s := spec()
		if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			s.SOCKS, s.HTTP = reachedAt(s.SOCKS, la), reachedAt(s.HTTP, la)
		}
		var b bytes.Buffer
		writePAC(&b, s)
		w.Header().Set("Content-Type", pacContentType)
		w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
		// Browsers cache a PAC file; a restarted proxy may listen elsewhere.
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.Method == http.MethodGet {
			_, _ = w.Write(b.Bytes())
		}
	})
}

// reachedAt is addr with an unspecified host (0.0.0.0, ::, "") replaced
// by local's IP: where a client that reached local finds the listener.
func reachedAt(addr string, local net.Addr) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return addr
	}
	ta, ok := local.(*net.TCPAddr)
	if !ok {
		return addr
	}
	ip := ta.IP
	if v4 := ip.To4(); v4 != nil {
		ip = v4 // an IPv4 client of a dual-stack listener: ::ffff:127.0.0.1
	}
	return net.JoinHostPort(ip.String(), port)
}

// pacOptions are relayctl pac's own flags.
type pacOptions struct {
	hosts          []string
	proxy, http    string
	fallbackDirect bool
	serve          string
	rules          rulesFlags
}

func pacCmd() *cobra.Command { return pacCmdOf(new(planFlags)) }

// pacCmdOf is pacCmd filling in f from its flags: tests read there what the
// flags hand the planner.
func pacCmdOf(f *planFlags) *cobra.Command {
	var o pacOptions
	cmd := &cobra.Command{
		Use:   "pac [--dst <region|relay|host:port>] [--proxy HOST:PORT] [--serve ADDR]",
		Short: "Print or serve a PAC file that sends hosts to a relay or to relayctl connect",
		Long: `Print a proxy auto-config (PAC) file for browsers, or serve it over HTTP
(--serve ADDR, at ` + pacPath + `; Chromium ignores file:// PAC URLs).

With --proxy and/or --http-proxy and no --dst, the file sends hosts matching
--hosts (default: every host) to that SOCKS5 front end, then that HTTP
proxy: with relayctl connect's addresses, it is the file connect serves at
http://127.0.0.1:8080` + pacPath + `.

With --dst, it plans the path to --dst (as relayctl plan does): hosts matching
--hosts (default: --dst's host) go through the plan's first relay (its SOCKS5
and HTTP front ends in the registry, or --proxy/--http-proxy). A browser
cannot carry a route itself, so a chain of more than one relay needs that
entry relay to run with routing: plan (it then plans the rest). When the
plan is direct the file says so and sends everything directly.

Loopback (localhost, 127.0.0.0/8, ::1) always goes direct. The file names
only SOCKS5 (the browser sends names to the proxy, which resolves them) and
PROXY entries. Without --fallback-direct it names no DIRECT after them: when
the proxy is down, the browser fails those hosts instead of sending them
around the relays. The file holds addresses only, never credentials.

With --rules FILE (instead of --hosts) the file decides by the rule file
relayctl connect and relays read (docs/rules.md), first match winning:
DIRECT rules go DIRECT, PLAN and CHAIN rules and hosts no rule matches take
the proxy (which applies the same rules to choose the chain), REJECT rules
get ` + pacRejectProxy + `, where nothing listens, and fail. A name is never
resolved in the browser to match IP rules: they match literal addresses
only, as in connect and relays.`,
		Example: `  # the file relayctl connect serves, for its default addresses
  relayctl pac --proxy 127.0.0.1:1080 --http-proxy 127.0.0.1:8080 > relaymesh.pac

  # relayctl connect --rules rules.txt's own file, for its default addresses
  relayctl pac --proxy 127.0.0.1:1080 --http-proxy 127.0.0.1:8080 --rules rules.txt

  # Japanese hosts through the entry relay of the plan to Tokyo, served for Chromium
  relayctl pac --fleet fleet.yaml --dst tokyo --hosts '*.jp' --serve 127.0.0.1:8088

  # Japanese hosts through the entry relay of a plan to Tokyo that stripes no segment
  relayctl pac --fleet fleet.yaml --dst tokyo --hosts '*.jp' --max-stripes 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := o.spec(cmd.Context(), f)
			if err != nil {
				return err
			}
			if o.serve != "" {
				return servePAC(cmd, o.serve, spec)
			}
			writePAC(cmd.OutOrStdout(), spec)
			return nil
		},
	}
	f.register(cmd, false)
	f.maxStripesFlag(cmd)
	fl := cmd.Flags()
	fl.Lookup("dst").Usage = "plan to this region, relay or host:port; --hosts go to its first relay (default: no plan)"
	fl.StringSliceVar(&o.hosts, "hosts", nil, "host patterns (shExpMatch) that take the proxy, e.g. '*.jp' (default: all, or --dst's host)")
	fl.StringVar(&o.proxy, "proxy", "", "SOCKS5 host:port to send them to (default with --dst: the plan's first relay)")
	fl.StringVar(&o.http, "http-proxy", "", "HTTP proxy host:port to try after the SOCKS5 one (default with --dst: the plan's first relay)")
	fl.BoolVar(&o.fallbackDirect, "fallback-direct", false, "end the proxy list with DIRECT: if the proxy is down, those hosts go unproxied, not fail")
	fl.StringVar(&o.serve, "serve", "", "serve the file over HTTP at ADDR"+pacPath+" (e.g. 127.0.0.1:8088) instead of printing it")
	o.rules.register(cmd)
	return cmd
}

// spec is the PAC file the flags ask for: planned with --dst, else the
// given proxies.
func (o *pacOptions) spec(ctx context.Context, f *planFlags) (pacSpec, error) {
	s := pacSpec{Hosts: o.hosts, SOCKS: o.proxy, HTTP: o.http, FallbackDirect: o.fallbackDirect}
	set, err := o.rules.load(os.Stderr)
	if err != nil {
		return s, err
	}
	s.Rules = set
	if f.dst == "" {
		if s.SOCKS == "" && s.HTTP == "" {
			return s, errors.New("--proxy or --http-proxy (e.g. relayctl connect's --proxy 127.0.0.1:1080 --http-proxy 127.0.0.1:8080), or --dst to plan and take the plan's first relay")
		}
		return s, s.validate()
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	p, err := f.plan(ctx)
	if err != nil {
		return s, err
	}
	if len(s.Hosts) == 0 && s.Rules == nil {
		host, _, err := net.SplitHostPort(f.dst)
		if err != nil {
			return s, errors.New("--hosts: which hosts should take this plan? (e.g. --hosts '*.jp'); only a host:port --dst names its own host")
		}
		s.Hosts = []string{host}
	}
	b := p.Result.Best
	s.Header = []string{
		"relaymesh PAC for " + f.dst + ", planned by relayctl pac on " + time.Now().UTC().Format(time.RFC3339),
		"plan: " + orDirect(b.Chain),
	}
	if len(b.Chain) == 0 {
		s.SOCKS, s.HTTP = "", ""
		return s, nil
	}
	s.Header = append(s.Header, fmt.Sprintf("predicted %.1f Mbit/s, %.2fx direct", b.PredictedBps/1e6, b.Speedup))
	if s.SOCKS == "" && s.HTTP == "" {
		if err := entryFronts(&s, p, b.Chain[0], f.matrixPath); err != nil {
			return s, err
		}
	}
	return s, s.validate()
}

// entryFronts points s at the front ends of the plan's first relay, as the
// registry lists them.
func entryFronts(s *pacSpec, p *planned, first, matrixPath string) error {
	if p.Relays == nil {
		return fmt.Errorf("--matrix %s holds no relay addresses: give --proxy HOST:PORT (relay %s's SOCKS5 front end, or relayctl connect's 127.0.0.1:1080)", matrixPath, first)
	}
	r, ok := p.Relays[first]
	if !ok || (r.SOCKS == "" && r.HTTP == "") {
		return fmt.Errorf("relay %s has no SOCKS5 or HTTP front end in the registry: give --proxy HOST:PORT", first)
	}
	s.SOCKS, s.HTTP = r.SOCKS, r.HTTP
	if len(p.Result.Best.Chain) > 1 {
		s.Header = append(s.Header, "the entry "+first+" must run with routing: plan to carry the rest of the chain")
	}
	return nil
}

// servePAC serves spec at addr until SIGINT or SIGTERM.
func servePAC(cmd *cobra.Command, addr string, spec pacSpec) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--serve: %w", err)
	}
	srv := &http.Server{Handler: pacHandler(func() pacSpec { return spec }), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Fprintf(cmd.ErrOrStderr(), "relayctl pac: serving http://%s%s\n", ln.Addr(), pacPath)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// connectPAC is the PAC file relayctl connect serves on its HTTP
// listener: every host but loopback to its SOCKS5 listener, then its HTTP
// one, as its listeners are bound, under its rules (relayctl pac --proxy
// ... --http-proxy ... [--rules ...] writes the same file).
func connectPAC(srv *relay.Server, fallbackDirect bool, set *rules.Set) http.Handler {
	return pacHandler(func() pacSpec {
		return pacSpec{SOCKS: srv.SOCKSAddr(), HTTP: srv.HTTPAddr(), FallbackDirect: fallbackDirect, Rules: set}
	})
}

// pacNote is where connect's start line says its PAC file is.
func pacNote(srv *relay.Server) string {
	if srv.HTTPAddr() == "" {
		return ""
	}
	return " (PAC file: http://" + srv.HTTPAddr() + pacPath + ")"
}
