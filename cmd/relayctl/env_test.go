package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// shEnv runs script in sh and returns the proxy variables it leaves set,
// by name.
func shEnv(t *testing.T, script string) map[string]string {
	t.Helper()
	cmd := exec.Command("sh", "-c", script+"\nenv")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // none of the caller's proxy variables
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sh: %v\n%s\n%s", err, script, out)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		name, value, ok := strings.Cut(line, "=")
		if ok && strings.HasSuffix(strings.ToLower(name), "_proxy") {
			vars[name] = value
		}
	}
	return vars
}

// The POSIX lines, run by sh as eval "$(relayctl env)" runs them, set
// every variable (both cases), and --unset's lines remove them again.
func TestEnvPOSIXInSh(t *testing.T) {
	for _, c := range []struct {
		args       []string
		socks, web string
	}{
		{nil, "socks5h://127.0.0.1:1080", "http://127.0.0.1:8080"},
		{[]string{"--socks", "0.0.0.0:1081", "--http", "[::]:8081"}, "socks5h://127.0.0.1:1081", "http://[::1]:8081"},
		{[]string{"--http", ""}, "socks5h://127.0.0.1:1080", "socks5h://127.0.0.1:1080"},
		{[]string{"--socks", ""}, "http://127.0.0.1:8080", "http://127.0.0.1:8080"},
	} {
		out, err := runRelayctl(append([]string{"env", "--shell", "posix"}, c.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		// The lines themselves, and through eval "$(...)" as the help
		// says to run them.
		file := filepath.Join(t.TempDir(), "env.sh")
		if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		got := shEnv(t, out)
		evald := shEnv(t, `eval "$(cat '`+file+`')"`)
		want := map[string]string{
			"ALL_PROXY": c.socks, "HTTP_PROXY": c.web, "HTTPS_PROXY": c.web, "NO_PROXY": "localhost,127.0.0.0/8,::1",
		}
		for name, v := range want {
			for _, n := range []string{name, strings.ToLower(name)} {
				if got[n] != v || evald[n] != v {
					t.Errorf("%v: %s = %q (eval: %q), want %q\n%s", c.args, n, got[n], evald[n], v, out)
				}
			}
		}
		unset, err := runRelayctl("env", "--shell", "posix", "--unset")
		if err != nil {
			t.Fatal(err)
		}
		if left := shEnv(t, out+unset); len(left) != 0 {
			t.Errorf("--unset left %v", left)
		}
	}
}

func TestEnvShells(t *testing.T) {
	for shell, want := range map[string]string{
		"fish":       "set -gx ALL_PROXY 'socks5h://127.0.0.1:1080';\n",
		"powershell": "$env:HTTPS_PROXY = 'http://127.0.0.1:8080'\n",
		"posix":      "export no_proxy='localhost,127.0.0.0/8,::1'\n",
	} {
		out, err := runRelayctl("env", "--shell", shell)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, want) || strings.Count(out, "\n") != 8 {
			t.Errorf("--shell %s: want 8 lines with %q:\n%s", shell, want, out)
		}
	}
	for path, want := range map[string]string{
		"/usr/bin/fish": shellFish, "/usr/bin/pwsh": shellPowerShell, "pwsh.exe": shellPowerShell,
		"/bin/bash": shellPOSIX, "/bin/zsh": shellPOSIX, "": shellPOSIX,
	} {
		if got := shellOf(path); got != want {
			t.Errorf("shellOf(%q) = %s, want %s", path, got, want)
		}
	}
	for _, bad := range [][]string{
		{"env", "--shell", "tcsh"},
		{"env", "--socks", "", "--http", ""},
		{"env", "--socks", "127.0.0.1"},
		{"env", "--http", "127.0.0.1:8080'; rm -rf ~; '"},
	} {
		if _, err := runRelayctl(bad...); err == nil {
			t.Errorf("relayctl %q: accepted", bad)
		}
	}
}

// docs/clients.md shows connect's PAC file and relayctl env's lines as
// relayctl writes them today.
func TestDocClientsExamples(t *testing.T) {
	data, err := os.ReadFile("../../docs/clients.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	pac, err := runRelayctl("pac", "--proxy", "127.0.0.1:1080", "--http-proxy", "127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(doc, "```\n"+pac+"```\n") {
		t.Errorf("docs/clients.md does not show the PAC file connect serves:\n%s", pac)
	}
	env, err := runRelayctl("env", "--shell", "posix")
	if err != nil {
		t.Fatal(err)
	}
	indented := "    $ relayctl env\n    " + strings.ReplaceAll(strings.TrimSuffix(env, "\n"), "\n", "\n    ") + "\n"
	if !strings.Contains(doc, indented) {
		t.Errorf("docs/clients.md does not show relayctl env's lines:\n%s", indented)
	}
}
