package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/configs"
	"github.com/relaymesh/relaymesh/pkg/lab"
	"github.com/relaymesh/relaymesh/pkg/lab/topology"
	"github.com/relaymesh/relaymesh/pkg/lab/wanemu"
	"github.com/relaymesh/relaymesh/pkg/traffic"
	"github.com/relaymesh/relaymesh/relay"
)

// labHeapLimitBytes is where the lab process's garbage collector starts
// working (see wanemu.QuietGC): the links preallocate 8 MiB of packet
// slots per direction, so even world (68 directions) stays far below it;
// a direction that holds more packets grows to what its link needs
// (wanemu.SlotsFor, at most 128 MiB), which only a few can at once.
const labHeapLimitBytes = 2 << 30

// exitError carries a command's exit code up to main.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func labCmd() *cobra.Command {
	var stateRoot string
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "An emulated multi-region WAN on this machine (needs root)",
		Long: `relayctl lab builds an emulated WAN from a topology file (configs/lab/*.yaml):
one network namespace per node, links with delay, rate, loss and jitter
emulated over TUN devices (no netem needed), relayd on every relay node and a
traffic service on every server node. Commands then run inside the lab.

Inside a lab, node names resolve (curl -x socks5h://r1:1080 http://server:8000/...)
and ports are fixed: relays serve SOCKS5 on 1080, HTTP on 8080 and admin on
9090; servers serve HTTP on 8000 with GET /bytes/N (N pseudo-random bytes),
GET /sha256/N (their SHA-256) and POST /upload (answers length and SHA-256).
Commands see the lab's fleet file in $RELAYMESH_FLEET.

Every link checks itself, and a run is judged by what the emulator's own
timing error can do to the figures it measures: a link's mean extra delay
and its p99 lateness as shares of the link's RTT, and its longest stall as a
share of --window, may move a figure by at most a third of --tolerance
(15 % by default, so 5 %; docs/lab.md has the measurements behind it).
--strict judges by absolute bounds instead (more than 1 % of a direction's
packets over 0.5 ms late, at 99 % confidence, or one over 20 ms). Either
way a packet dropped by a TUN ring or the emulator makes the run invalid.
lab run and lab status say which check was used and the worst link.`,
		Example: `  # one command, torn down afterwards: a 64 MiB download through relay r1
  sudo relayctl lab run -t configs/lab/split2.yaml -- \
      curl -sS -o /dev/null -w '%{speed_download}\n' -x socks5h://r1:1080 http://server:8000/bytes/67108864

  # a lab that stays up
  sudo relayctl lab up -t configs/lab/world.yaml
  sudo relayctl lab status
  sudo relayctl lab exec client -- curl -sS -x http://frankfurt:8080 http://srv-tokyo:8000/bytes/1000000 -o /dev/null
  sudo relayctl lab down`,
	}
	cmd.PersistentFlags().StringVar(&stateRoot, "state-dir", lab.DefaultStateRoot, "where labs keep state, written configs and service logs")
	// Every lab command needs root (namespaces, TUN, the state directory);
	// say so first, with what to do, rather than fail on a side effect.
	cmd.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if c.Name() == "traffic" {
			return nil // runs inside a lab node, started by the lab itself
		}
		return lab.CheckPrivileges()
	}
	cmd.AddCommand(labUpCmd(&stateRoot), labDownCmd(&stateRoot), labStatusCmd(&stateRoot),
		labExecCmd(&stateRoot), labRunCmd(&stateRoot), labLinkCmd(&stateRoot), labTrafficCmd(), labDoctorCmd())
	return cmd
}

type labFlags struct {
	topoPath, relaydPath, logLevel string
	registry, consulPath           string
	transport                      string
	calibration                    string
	// The self-check (lab.Check): a relative tolerance in per cent, the
	// shortest span a figure is averaged over, or the absolute bounds.
	tolerancePct float64
	window       time.Duration
	strict       bool
}

func (f *labFlags) register(cmd *cobra.Command) {
	cmd.Long += "\n\n" + shippedTopologies()
	cmd.Flags().StringVarP(&f.topoPath, "topology", "t", "", "topology: a file, or a shipped topology's name (listed above; configs/lab/README.md)")
	cmd.Flags().StringVar(&f.relaydPath, "relayd", "", "relayd binary for relay nodes (default: next to relayctl, then $PATH)")
	cmd.Flags().StringVar(&f.logLevel, "log-level", "warn", "lab log level: debug, info, warn or error")
	cmd.Flags().StringVar(&f.registry, "registry", "fleet", `how relays share measurements: "fleet" (the lab's fleet file) or "consul" (a Consul node)`)
	cmd.Flags().StringVar(&f.transport, "transport", "tls", `the relays' links: "tls" (TLS 1.3 from the lab's fleet secret) or "plain"`)
	cmd.Flags().StringVar(&f.consulPath, "consul", "", "consul binary for --registry consul (default: next to relayctl, then $PATH)")
	cmd.Flags().StringVar(&f.calibration, "calibration", lab.DefaultCalibrationPath, "lab doctor's result for this machine, checked against the topology's estimated peak")
	cmd.Flags().Float64Var(&f.tolerancePct, "tolerance", 100*wanemu.DefaultBudget.ToleranceShare, "self-check: the relative tolerance, per cent, of the figures this run measures")
	cmd.Flags().DurationVar(&f.window, "window", time.Duration(wanemu.DefaultBudget.WindowNs), "self-check: the shortest span one measured figure is averaged over (a stall is weighed against it)")
	cmd.Flags().BoolVar(&f.strict, "strict", false, "self-check by the absolute lateness bounds instead, whatever the run measures")
	_ = cmd.MarkFlagRequired("topology")
	_ = cmd.RegisterFlagCompletionFunc("topology", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return configs.LabTopologies(), cobra.ShellCompDirectiveDefault // and files
	})
}

// loadTopology reads the topology and warns (on w) when its estimated
// peak load is beyond what lab doctor measured this machine holds; it
// refuses bad engine settings in the environment.
func (f *labFlags) loadTopology(w io.Writer) (*topology.Topology, string, error) {
	if _, err := wanemu.ConfigFromEnv(); err != nil {
		return nil, "", err
	}
	topo, abs, err := loadTopology(f.topoPath)
	if err != nil {
		return nil, "", err
	}
	c, err := lab.LoadCalibration(f.calibration)
	switch {
	case err == nil:
		if werr := c.CheckAgainst(topo); werr != nil {
			fmt.Fprintf(w, "relayctl lab: warning: %v\n", werr)
		}
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(w, "relayctl lab: note: this machine is not calibrated: `sudo relayctl lab doctor` measures what load the link emulator holds, and lab up/run then warn before a topology beyond it\n")
	default:
		fmt.Fprintf(w, "relayctl lab: warning: %v\n", err)
	}
	return topo, abs, nil
}

// options resolves the binaries a lab runs.
func (f *labFlags) options(stateRoot string) (lab.Options, *zap.Logger, error) {
	log, err := relay.NewLogger(f.logLevel, "console")
	if err != nil {
		return lab.Options{}, nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return lab.Options{}, nil, err
	}
	relayd, err := findRelayd(f.relaydPath)
	if err != nil {
		return lab.Options{}, nil, err
	}
	opts := lab.Options{StateRoot: stateRoot, RelaydPath: relayd, TrafficCmd: []string{self, "lab", "traffic"}, Log: log, Registry: f.registry, Transport: f.transport,
		Check: lab.Check{Strict: f.strict, Budget: wanemu.Budget{ToleranceShare: f.tolerancePct / 100, WindowNs: int64(f.window)}}}
	if err := opts.Check.Budget.Validate(); err != nil {
		return lab.Options{}, nil, fmt.Errorf("--tolerance/--window: %w", err)
	}
	if f.transport != "plain" && f.transport != "tls" {
		return lab.Options{}, nil, fmt.Errorf("--transport %q: want plain or tls", f.transport)
	}
	if f.registry == "consul" {
		opts.ConsulPath = f.consulPath
		if opts.ConsulPath == "" {
			opts.ConsulPath = filepath.Join(filepath.Dir(self), "consul")
			if _, err := os.Stat(opts.ConsulPath); err != nil {
				if opts.ConsulPath, err = exec.LookPath("consul"); err != nil {
					return lab.Options{}, nil, errors.New("consul not found next to relayctl or in $PATH: run `make bin/consul` or pass --consul PATH")
				}
			}
		}
	}
	return opts, log, nil
}

// findRelayd is the relayd binary lab relays run: flag if given, else the
// one next to relayctl, else $PATH's.
func findRelayd(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	relayd := filepath.Join(filepath.Dir(self), "relayd")
	if _, err := os.Stat(relayd); err != nil {
		if relayd, err = exec.LookPath("relayd"); err != nil {
			return "", errors.New("relayd not found next to relayctl or in $PATH: run `make build` (both land in bin/) or pass --relayd PATH")
		}
	}
	return relayd, nil
}

// loadTopology reads the topology file at path or, when there is no such
// file and path is a plain name, the shipped topology of that name. It
// returns the topology and where it came from (an absolute path, or
// "NAME (built in)").
func loadTopology(path string) (*topology.Topology, string, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if data, ok := configs.LabTopology(path); ok {
			topo, err := topology.Parse(data)
			if err != nil {
				return nil, "", fmt.Errorf("built-in topology %s: %w", path, err)
			}
			return topo, strings.TrimSuffix(path, ".yaml") + " (built in)", nil
		}
		if !strings.ContainsAny(path, "/.") {
			return nil, "", fmt.Errorf("topology %q: no such file, and not a shipped topology (%s)", path, strings.Join(configs.LabTopologies(), ", "))
		}
	}
	topo, err := topology.Load(path)
	if err != nil {
		return nil, "", err
	}
	abs, _ := filepath.Abs(path)
	return topo, abs, nil
}

// shippedTopologies lists the names -t takes besides a file, wrapped for
// a command's long help.
func shippedTopologies() string {
	var b strings.Builder
	line := "Shipped topologies (configs/lab/README.md):"
	names := configs.LabTopologies()
	for i, name := range names {
		word := " " + name + ","
		if i == len(names)-1 {
			word = " " + name + "."
		}
		if len(line)+len(word) > 78 {
			b.WriteString(line + "\n")
			line = word[1:]
			continue
		}
		line += word
	}
	b.WriteString(line)
	return b.String()
}

func labUpCmd(stateRoot *string) *cobra.Command {
	var f labFlags
	var foreground bool
	var readyFD int
	cmd := &cobra.Command{
		Use:   "up -t TOPOLOGY",
		Short: "Build a lab and keep it up until `relayctl lab down`",
		Long: `Build the lab described by TOPOLOGY (a file, or a shipped topology's name:
world, split2, ...) in a background process that holds the links,
and return once every relay and server accepts connections. The lab stays up
until ` + "`relayctl lab down`" + `. Its files (fleet, relay configs, service logs) are in
--state-dir/NAME.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			topo, abs, err := f.loadTopology(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if !foreground {
				return startLabDaemon(cmd, *stateRoot, f, topo.Name)
			}
			opts, log, err := f.options(*stateRoot)
			if err != nil {
				return err
			}
			defer log.Sync()
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			wanemu.QuietGC(labHeapLimitBytes)
			l, err := lab.Up(ctx, topo, abs, opts)
			ready := os.Stdout
			if readyFD > 0 {
				ready = os.NewFile(uintptr(readyFD), "ready")
			}
			if err != nil {
				fmt.Fprintf(ready, "error: %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
				return err
			}
			defer l.Close()
			if err := l.ServeControl(ctx); err != nil {
				fmt.Fprintf(ready, "error: control socket: %v\n", err)
				return err
			}
			fmt.Fprintln(ready, "ready")
			if readyFD > 0 {
				ready.Close()
			}
			<-ctx.Done()
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&foreground, "foreground", false, "stay in the foreground (until SIGTERM or SIGINT) instead of starting a background process")
	cmd.Flags().IntVar(&readyFD, "ready-fd", 0, "internal: report readiness on this file descriptor")
	_ = cmd.Flags().MarkHidden("ready-fd")
	return cmd
}

// labDaemonArgs is the command line of `lab up --foreground` for the lab
// that cmd (a `lab up`) was asked for: every flag given to cmd, whichever
// it is, so that none (--transport, the self-check's --window) is lost
// on the way to the process that runs the lab.
func labDaemonArgs(cmd *cobra.Command, stateRoot string) []string {
	args := []string{"lab", "--state-dir", stateRoot, "up", "--foreground", "--ready-fd", "3"}
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if cmd.LocalFlags().Lookup(fl.Name) != nil { // not lab's --state-dir
			args = append(args, "--"+fl.Name+"="+fl.Value.String())
		}
	})
	return args
}

// startLabDaemon re-runs `lab up --foreground` as a detached process and
// waits for it to report ready (or why not).
func startLabDaemon(cmd *cobra.Command, stateRoot string, f labFlags, name string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir := filepath.Join(stateRoot, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	logPath := filepath.Join(dir, "lab.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	d := exec.Command(self, labDaemonArgs(cmd, stateRoot)...)
	d.Stdout, d.Stderr = logf, logf
	d.ExtraFiles = []*os.File{pw}
	d.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := d.Start(); err != nil {
		pw.Close()
		return err
	}
	pw.Close()
	line, _ := bufio.NewReader(pr).ReadString('\n')
	pr.Close()
	if strings.TrimSpace(line) != "ready" {
		_ = d.Wait()
		msg := strings.TrimPrefix(strings.TrimSpace(line), "error: ")
		if msg == "" {
			msg = "the lab process exited; its log: " + logPath
		}
		return fmt.Errorf("lab %s did not come up: %s", name, msg)
	}
	_ = d.Process.Release()
	s, err := lab.LoadState(dir)
	if err != nil {
		return err
	}
	st, err := lab.FetchStatus(cmd.Context(), s)
	if err != nil {
		return err
	}
	printStatus(cmd.OutOrStdout(), st)
	fmt.Fprintf(cmd.OutOrStdout(), "\nlab %s is up (pid %d). Run commands with `relayctl lab exec client -- CMD`; stop it with `relayctl lab down`.\n", name, s.PID)
	return nil
}

func labDownCmd(stateRoot *string) *cobra.Command {
	return &cobra.Command{
		Use:   "down [NAME]",
		Short: "Stop a lab started by `relayctl lab up` (the only one, or NAME)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := lab.Find(*stateRoot, firstArg(args))
			if err != nil {
				return err
			}
			_ = syscall.Kill(s.PID, syscall.SIGTERM)
			deadline := time.Now().Add(30 * time.Second)
			for syscall.Kill(s.PID, 0) == nil {
				if time.Now().After(deadline) {
					_ = syscall.Kill(s.PID, syscall.SIGKILL)
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "lab %s is down (logs stay in %s)\n", s.Name, s.Dir)
			return nil
		},
	}
}

func firstArg(args []string) string {
	if len(args) > 0 {
		return args[0]
	}
	return ""
}

func labStatusCmd(stateRoot *string) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status [NAME]",
		Short: "Nodes, links, live link statistics and the self-check verdict",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := lab.Find(*stateRoot, firstArg(args))
			if err != nil {
				return err
			}
			st, err := lab.FetchStatus(cmd.Context(), s)
			if err != nil {
				return err
			}
			switch output {
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			case "table":
				printStatus(cmd.OutOrStdout(), st)
				return nil
			}
			return fmt.Errorf("--output %q: want table or json", output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

func printStatus(w io.Writer, st *lab.Status) {
	fmt.Fprintf(w, "lab %s (pid %d, up %.0f s), fleet file %s\n\n", st.Name, st.PID, st.UptimeS, st.FleetPath)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tREGION\tADDRESS\tSERVICE")
	for _, n := range st.Nodes {
		svc := "-"
		if n.Service != "" {
			svc = n.Service + " (running)"
			if !n.Running {
				svc = n.Service + " (EXITED, see " + n.Log + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.Name, orDash(n.Role), orDash(n.Region), n.Addr, svc)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LINK\tDELAY ms\tRATE\tLOSS\tPACKETS\tMBYTES\tDROPS q/loss/slots\tLATENESS mean/p99/max ms\tMOVES\tCHECK")
	for _, l := range st.Links {
		rate := "-"
		if l.RateMbit > 0 {
			rate = fmt.Sprintf("%g Mbit/s", l.RateMbit)
		}
		check := "ok"
		if l.Problem != "" {
			check = "INVALID"
		}
		for i, d := range []struct {
			from, to string
			s        *lab.LinkStatus
		}{{l.Between[0], l.Between[1], &l}, {l.Between[1], l.Between[0], &l}} {
			s := d.s.AB
			if i == 1 {
				s = d.s.BA
			}
			fmt.Fprintf(tw, "%s->%s\t%.2f\t%s\t%g\t%d\t%.1f\t%d/%d/%d\t%.3f/%.3f/%.3f\t%.2f %%\t%s\n", d.from, d.to, l.DelayMs[i], rate, l.Loss,
				s.Packets, float64(s.Bytes)/1e6, s.DropsQueue, s.DropsLoss, s.DropsSlots,
				float64(s.LatenessMeanNs)/1e6, float64(s.LatenessP99Ns)/1e6, float64(s.LatenessMaxNs)/1e6, 100*l.Effect.Moves, check)
		}
	}
	tw.Flush()
	if st.Valid {
		fmt.Fprintf(w, "\nself-check: ok (%s; no TUN ring drops, all services running)\n", st.Check)
		return
	}
	fmt.Fprintf(w, "\nself-check: INVALID (%s) — measurements taken in this lab are not trustworthy:\n", st.Check)
	for _, p := range st.Problems {
		fmt.Fprintln(w, "  -", p)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func labExecCmd(stateRoot *string) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "exec NODE -- CMD [ARGS...]",
		Short: "Run a command inside a node of a running lab",
		Long: `Run CMD inside NODE's network namespace, with node names resolvable and the
lab's fleet file in $RELAYMESH_FLEET. The exit code is CMD's.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := lab.Find(*stateRoot, name)
			if err != nil {
				return err
			}
			return runInLab(cmd.Context(), s, args[0], args[1:])
		},
	}
	cmd.Flags().StringVar(&name, "lab", "", "which lab, when more than one is up")
	return cmd
}

// runInLab runs argv in node with the terminal's stdio and returns its exit
// code as an exitError.
func runInLab(ctx context.Context, s *lab.State, node string, argv []string) error {
	c, err := s.Command(ctx, node, argv...)
	if err != nil {
		return err
	}
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	// The child shares our terminal's SIGINT; we wait for it to end.
	signal.Ignore(syscall.SIGINT)
	defer signal.Reset(syscall.SIGINT)
	err = c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return exitError{ee.ExitCode()}
	}
	return err
}

// commandAfterDash accepts lab run's arguments: a command, all of it after
// "--", so none of its flags is taken for relayctl's and a word meant as
// the topology is not run as the command.
func commandAfterDash(cmd *cobra.Command, args []string) error {
	switch dash := cmd.ArgsLenAtDash(); {
	case len(args) == 0:
		return errors.New("no command to run: relayctl lab run -t TOPOLOGY -- CMD [ARGS...]")
	case dash < 0:
		return fmt.Errorf("put the command after --: relayctl lab run -t TOPOLOGY -- %s", strings.Join(args, " "))
	case dash > 0:
		return fmt.Errorf("%q before --: the topology is -t %s, the command comes after --", args[0], args[0])
	}
	return nil
}

func labRunCmd(stateRoot *string) *cobra.Command {
	var f labFlags
	var report string
	cmd := &cobra.Command{
		Use:   "run -t TOPOLOGY -- CMD [ARGS...]",
		Short: "Bring a lab up, run CMD in its client node, tear it down",
		Long: `Build the lab, run CMD in the node named client, print its output, tear the lab
down and exit with CMD's exit code. Afterwards lab run prints the self-check:
the check used and the link whose timing error moves a figure most. When it
failed (the error could move a figure by more than a third of --tolerance,
or packets were dropped; see relayctl lab --help) the results are not
trustworthy: lab run says why and exits 3 even if CMD succeeded. Tell it
what CMD measures: --tolerance 15 --window 500ms for a rate checked within
15 % over half a second. TOPOLOGY is a file or a shipped topology's name
(world, split2, ...: the list below).`,
		Example: `  # the world topology's plan to Tokyo
  sudo relayctl lab run -t world -- relayctl plan --dst tokyo

  # a rate checked within 10 %, averaged over at least 2 s; the verdict as JSON
  sudo relayctl lab run -t split2 --tolerance 10 --window 2s --report verdict.json -- \
      curl -sS -o /dev/null -w '%{speed_download}\n' -x socks5h://r1:1080 http://server:8000/bytes/67108864

  # a topology file of your own, and a shell in its client node
  sudo relayctl lab run -t my-wan.yaml -- sh`,
		Args: commandAfterDash,
		RunE: func(cmd *cobra.Command, args []string) error {
			topo, abs, err := f.loadTopology(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			opts, log, err := f.options(*stateRoot)
			if err != nil {
				return err
			}
			defer log.Sync()
			wanemu.QuietGC(labHeapLimitBytes)
			l, err := lab.Up(cmd.Context(), topo, abs, opts)
			if err != nil {
				return err
			}
			// Tear down even on SIGTERM; SIGINT goes to the child, then here.
			term := make(chan os.Signal, 1)
			signal.Notify(term, syscall.SIGTERM)
			defer signal.Stop(term)
			l.ResetStats() // the self-check covers the command's run only
			done := make(chan error, 1)
			go func() { done <- runInLab(cmd.Context(), &l.State, "client", args) }()
			var runErr error
			select {
			case runErr = <-done:
			case <-term:
				runErr = errors.New("terminated")
			}
			verdict := l.Verdict()
			engine := lab.EngineSummary(wanemu.CurrentConfig().String(), wanemu.EngineStats())
			l.Close()
			// Every run says how it was judged and its worst link, valid
			// or not, so a figure can be read with its error beside it.
			fmt.Fprintf(os.Stderr, "relayctl lab: %s\n", verdict.Summary())
			if report != "" {
				if err := writeVerdict(report, verdict, engine); err != nil {
					return err
				}
			}
			if !verdict.Valid {
				fmt.Fprintf(os.Stderr, "relayctl lab: %s\n", engine)
				if runErr == nil {
					return exitError{3}
				}
			}
			return runErr
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&report, "report", "", "also write the self-check's verdict to this file as JSON")
	return cmd
}

// writeVerdict writes a run's self-check verdict and engine summary as JSON.
func writeVerdict(path string, v lab.Verdict, engine string) error {
	data, err := json.MarshalIndent(struct {
		lab.Verdict
		Engine string `json:"engine"`
	}{v, engine}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// labTrafficCmd is the traffic service the lab runs on server nodes.
func labTrafficCmd() *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "traffic --listen ADDR",
		Short: "Serve GET /bytes/N, GET /sha256/N and POST /upload (the lab's server nodes run this)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			srv := &http.Server{Handler: traffic.Handler(), ReadHeaderTimeout: 10 * time.Second}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			go func() {
				<-ctx.Done()
				srv.Close()
			}()
			fmt.Fprintf(cmd.ErrOrStderr(), "traffic service on %s\n", ln.Addr())
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8000", "listen address")
	cmd.Hidden = true
	return cmd
}

func labLinkCmd(stateRoot *string) *cobra.Command {
	var name string
	var rttMs, rateMbit, loss, jitterMs float64
	var delayMs []float64
	var queueKB int
	var down, up bool
	cmd := &cobra.Command{
		Use:   "link NODE_A NODE_B [flags]",
		Short: "Change a link of a running lab (delay, rate, loss, jitter) without restarting it",
		Long: `Change the link between NODE_A and NODE_B while the lab runs; flags not given
keep their value. Connections stay up: packets already in flight keep their
due time, later ones get the new parameters (order is kept).

--down cuts the link: every packet is dropped both ways, with no FIN and no
RST, as when a host vanishes or a path is cut. Cut every link of a node to
make the host vanish; --up restores the link as it was.`,
		Example: `  relayctl lab link client r1 --rtt-ms 80
  relayctl lab link r1 server --delay-ms 10,30 --loss 0.01
  relayctl lab link r1 r2 --rate-mbit 50 --queue-kb 128
  relayctl lab link r1 r2 --down`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := lab.Find(*stateRoot, name)
			if err != nil {
				return err
			}
			u := lab.LinkUpdate{Between: [2]string{args[0], args[1]}}
			f := cmd.Flags()
			if f.Changed("rtt-ms") {
				u.RTTMs = &rttMs
			}
			if f.Changed("delay-ms") {
				u.DelayMs = delayMs
			}
			if f.Changed("rate-mbit") {
				u.RateMbit = &rateMbit
			}
			if f.Changed("loss") {
				u.Loss = &loss
			}
			if f.Changed("jitter-ms") {
				u.JitterMs = &jitterMs
			}
			if f.Changed("queue-kb") {
				u.QueueKB = &queueKB
			}
			switch {
			case down && up:
				return errors.New("--down and --up: give one")
			case down, up:
				u.Down = &down
			}
			if !slices.ContainsFunc([]string{"rtt-ms", "delay-ms", "rate-mbit", "loss", "jitter-ms", "queue-kb", "down", "up"}, f.Changed) {
				return errors.New("nothing to change: give at least one of --rtt-ms, --delay-ms, --rate-mbit, --loss, --jitter-ms, --queue-kb, --down, --up")
			}
			lc, err := lab.RequestLinkUpdate(cmd.Context(), s, u)
			if err != nil {
				return err
			}
			ab, ba := lc.OneWayNs()
			if down {
				fmt.Fprintf(cmd.OutOrStdout(), "link %s-%s: cut (every packet dropped; --up restores it)\n", lc.Between[0], lc.Between[1])
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "link %s-%s: delay %.3f/%.3f ms, rate %g Mbit/s, loss %g, jitter %g ms, queue %d KiB (0: default)\n",
				lc.Between[0], lc.Between[1], float64(ab)/1e6, float64(ba)/1e6, cmp.Or(lc.RateMbit, topology.DefaultRateMbit), lc.Loss, lc.JitterMs, lc.QueueKB)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "lab", "", "which lab, when more than one is up")
	f.Float64Var(&rttMs, "rtt-ms", 0, "round-trip delay, ms, split equally between the directions")
	f.Float64SliceVar(&delayMs, "delay-ms", nil, "one-way delays NODE_A->NODE_B,NODE_B->NODE_A, ms")
	f.Float64Var(&rateMbit, "rate-mbit", 0, "rate per direction, Mbit/s (0: the 1000 Mbit/s default)")
	f.Float64Var(&loss, "loss", 0, "packet loss probability per direction, 0..1")
	f.Float64Var(&jitterMs, "jitter-ms", 0, "extra uniform random delay per packet, 0..N ms (order kept)")
	f.IntVar(&queueKB, "queue-kb", 0, "tail-drop queue of the rate limiter, KiB (0: default)")
	f.BoolVar(&down, "down", false, "cut the link: drop every packet both ways (a vanished host, a cut path)")
	f.BoolVar(&up, "up", false, "restore a cut link")
	return cmd
}
