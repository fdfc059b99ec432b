package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Shells relayctl env writes for.
const (
	shellPOSIX      = "posix"
	shellFish       = "fish"
	shellPowerShell = "powershell"
)

// proxyVar is one environment variable relayctl env sets.
type proxyVar struct{ name, value string }

// proxyEnv is the proxy variables for connect's SOCKS5 listener socks and
// HTTP listener http ("" = off; at least one is on): ALL_PROXY to the
// SOCKS5 one as socks5h (names reach the relays, so each host gets its
// own plan), HTTP_PROXY and HTTPS_PROXY to the HTTP one, NO_PROXY for
// loopback, each also in lower case (curl reads only http_proxy, most
// tools either). A listener that is off is stood in for by the other.
func proxyEnv(socks, http string) []proxyVar {
	socksURL, httpURL := "", ""
	if socks != "" {
		socksURL = "socks5h://" + socks
	}
	if http != "" {
		httpURL = "http://" + http
	}
	if socksURL == "" {
		socksURL = httpURL
	}
	if httpURL == "" {
		httpURL = socksURL
	}
	var noProxy []string
	for _, l := range loopback {
		noProxy = append(noProxy, l.noProxy)
	}
	var out []proxyVar
	for _, v := range []proxyVar{
		{"ALL_PROXY", socksURL}, {"HTTP_PROXY", httpURL}, {"HTTPS_PROXY", httpURL}, {"NO_PROXY", strings.Join(noProxy, ",")},
	} {
		out = append(out, v, proxyVar{strings.ToLower(v.name), v.value})
	}
	return out
}

// writeEnv writes vars as shell's commands: set them, or with unset
// remove them.
func writeEnv(w io.Writer, shell string, vars []proxyVar, unset bool) {
	for _, v := range vars {
		switch {
		case shell == shellFish && unset:
			fmt.Fprintf(w, "set -e %s;\n", v.name)
		case shell == shellFish:
			fmt.Fprintf(w, "set -gx %s %s;\n", v.name, fishQuote(v.value))
		case shell == shellPowerShell && unset:
			fmt.Fprintf(w, "Remove-Item -ErrorAction SilentlyContinue Env:%s\n", v.name)
		case shell == shellPowerShell:
			fmt.Fprintf(w, "$env:%s = %s\n", v.name, "'"+strings.ReplaceAll(v.value, "'", "''")+"'")
		case unset:
			fmt.Fprintf(w, "unset %s\n", v.name)
		default:
			fmt.Fprintf(w, "export %s=%s\n", v.name, "'"+strings.ReplaceAll(v.value, "'", `'\''`)+"'")
		}
	}
}

// fishQuote is s in fish's single quotes, where only \ and ' are escaped.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// shellOf is the shell $SHELL names, as relayctl env writes for it.
func shellOf(path string) string {
	switch strings.TrimSuffix(filepath.Base(path), ".exe") {
	case "fish":
		return shellFish
	case "pwsh", "powershell":
		return shellPowerShell
	}
	return shellPOSIX
}

// clientAddr is where a client on this host reaches a listener bound to
// addr: an unspecified host (0.0.0.0:1080, :1080) is reached on loopback.
func clientAddr(flag, addr string) (string, error) {
	if addr == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || strings.ContainsAny(addr, " '\"\\;$`\n") {
		return "", fmt.Errorf("--%s %q: want host:port, as relayctl connect --%s has it", flag, addr, flag)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if ip != nil && ip.To4() == nil {
			return net.JoinHostPort("::1", port), nil
		}
		return net.JoinHostPort("127.0.0.1", port), nil
	}
	return addr, nil
}

func envCmd() *cobra.Command {
	var socks, http, shell string
	var unset bool
	cmd := &cobra.Command{
		Use:   "env [--socks ADDR] [--http ADDR] [--shell posix|fish|powershell]",
		Short: "Print shell commands that point a shell's tools at relayctl connect",
		Long: `Print the commands that set the proxy variables most command-line tools
read (curl, git, pip, wget, Go, ...) to relayctl connect's listeners:

    ALL_PROXY, all_proxy      socks5h://127.0.0.1:1080 (SOCKS5, names resolved by the relays)
    HTTP_PROXY, http_proxy    http://127.0.0.1:8080 (the HTTP proxy listener)
    HTTPS_PROXY, https_proxy  http://127.0.0.1:8080
    NO_PROXY, no_proxy        localhost,127.0.0.0/8,::1

Run it with eval: eval "$(relayctl env)" in sh, bash or zsh;
relayctl env | source in fish; relayctl env | Out-String | Invoke-Expression
in PowerShell. --unset prints the commands that remove them.

It does not ask connect: --socks and --http default to connect's defaults;
give it the same --socks and --http as connect when connect runs with
others (an address connect takes on every interface, 0.0.0.0:1080, is
reached on loopback). A listener that is off ("") is stood in for by the
other. It warns (on stderr) when nothing listens at an address.`,
		Example: `  eval "$(relayctl env)"
  relayctl env --socks 127.0.0.1:1081 --http ""
  relayctl env --shell fish | source
  eval "$(relayctl env --unset)"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if shell == "" {
				shell = shellOf(os.Getenv("SHELL"))
			}
			switch shell {
			case shellPOSIX, shellFish, shellPowerShell:
			default:
				return fmt.Errorf("--shell %q: want posix, fish or powershell", shell)
			}
			s, err := clientAddr("socks", socks)
			if err != nil {
				return err
			}
			h, err := clientAddr("http", http)
			if err != nil {
				return err
			}
			if s == "" && h == "" {
				return fmt.Errorf("--socks and --http are both off: name at least one of relayctl connect's listeners")
			}
			if !unset {
				warnIfNotListening(cmd.ErrOrStderr(), s, h)
			}
			writeEnv(cmd.OutOrStdout(), shell, proxyEnv(s, h), unset)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&socks, "socks", "127.0.0.1:1080", `relayctl connect's SOCKS5 listener, as its --socks ("": off)`)
	fl.StringVar(&http, "http", "127.0.0.1:8080", `relayctl connect's HTTP proxy listener, as its --http ("": off)`)
	fl.StringVar(&shell, "shell", "", "posix (sh, bash, zsh), fish or powershell (default: from $SHELL)")
	fl.BoolVar(&unset, "unset", false, "print the commands that remove the variables instead")
	return cmd
}

// warnIfNotListening says on w which of addrs nothing accepts a TCP
// connection on: the variables would point at nothing.
func warnIfNotListening(w io.Writer, addrs ...string) {
	for _, a := range addrs {
		if a == "" {
			continue
		}
		c, err := net.DialTimeout("tcp", a, time.Second)
		if err != nil {
			fmt.Fprintf(w, "relayctl env: nothing listens on %s (is relayctl connect running, with these addresses?)\n", a)
			continue
		}
		c.Close()
	}
}
