package lab

// A lab's state on disk (state.json in its directory), so that other
// relayctl processes find a running lab, run commands in its nodes and
// tear it down.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/relaymesh/relaymesh/pkg/envvar"
	"github.com/relaymesh/relaymesh/pkg/fleet"
	"github.com/relaymesh/relaymesh/pkg/lab/wanemu"
)

// FleetPath is the lab's fleet file.
func (s *State) FleetPath() string { return filepath.Join(s.Dir, "fleet.yaml") }

// Command returns a command that runs argv inside node's namespace, with the
// lab's fleet file as the default registry and node names resolvable.
func (s *State) Command(ctx context.Context, node string, argv ...string) (*exec.Cmd, error) {
	n, ok := s.Nodes[node]
	if !ok {
		return nil, fmt.Errorf("lab %s has no node %q (nodes: %s)", s.Name, node, strings.Join(s.nodeNames(), ", "))
	}
	if len(argv) == 0 {
		return nil, errors.New("no command given")
	}
	if s.AppCPUs != "" {
		if taskset, err := exec.LookPath("taskset"); err == nil {
			argv = append([]string{taskset, "-c", s.AppCPUs}, argv...)
		}
	}
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Netns}, argv...)...)
	cmd.Env = append(os.Environ(), envvar.Lab+"="+s.Name, envvar.FleetSecretFile+"="+filepath.Join(s.Dir, "fleet-secret"))
	if s.Transport != "" {
		cmd.Env = append(cmd.Env, envvar.Transport+"="+s.Transport)
	}
	if s.ConsulAddr != "" {
		cmd.Env = append(cmd.Env, envvar.Consul+"="+s.ConsulAddr)
		// Consul does not carry the relays' admin token; relayctl plan
		// needs it for the relays' /v1/probe and /v1/info.
		if f, err := fleet.Load(s.FleetPath()); err == nil && f.AdminToken != "" {
			cmd.Env = append(cmd.Env, envvar.AdminToken+"="+f.AdminToken)
		}
	} else {
		cmd.Env = append(cmd.Env, envvar.Fleet+"="+s.FleetPath())
	}
	return cmd, nil
}

func (s *State) nodeNames() []string {
	var out []string
	for n := range s.Nodes {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (l *Lab) writeState() error {
	data, err := json.MarshalIndent(&l.State, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(l.Dir, "state.json"), data, 0o644)
}

// cleanupState removes what a lab made outside its process: namespaces,
// /etc/netns entries and state.json.
func cleanupState(s *State) {
	for _, n := range s.Nodes {
		_ = wanemu.DelNetns(n.Netns)
		_ = os.RemoveAll(filepath.Join("/etc/netns", n.Netns))
	}
	_ = os.Remove(filepath.Join(s.Dir, "state.json"))
}

// LoadState reads a running lab's state from its directory.
func LoadState(dir string) (*State, error) {
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "state.json"), err)
	}
	return &s, nil
}

// Running lists the labs under root whose process is alive.
func Running(root string) ([]*State, error) {
	if root == "" {
		root = DefaultStateRoot
	}
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*State
	for _, e := range entries {
		if s, err := LoadState(filepath.Join(root, e.Name())); err == nil && processAlive(s.PID) {
			out = append(out, s)
		}
	}
	return out, nil
}

// Find returns the running lab called name, or the only running lab when
// name is empty.
func Find(root, name string) (*State, error) {
	labs, err := Running(root)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range labs {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	switch {
	case len(labs) == 0:
		return nil, errors.New("no lab is up: start one with `relayctl lab up -t configs/lab/split2.yaml`")
	case name != "":
		return nil, fmt.Errorf("no lab %q is up (running: %s)", name, strings.Join(names, ", "))
	case len(labs) > 1:
		return nil, fmt.Errorf("%d labs are up (%s): say which with --lab NAME", len(labs), strings.Join(names, ", "))
	}
	return labs[0], nil
}

func processAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}
