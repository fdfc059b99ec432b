package labpeer

import (
	"os/exec"
	"slices"
	"syscall"
	"testing"

	"github.com/relaymesh/relaymesh/pkg/testenv"
)

// GroupMembers finds a live process by its group, and KillGroup empties
// the group (read through /proc with procfs).
func TestGroupMembersAndKill(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		testenv.Need(t, "no sleep to run (%v): install the Debian package coreutils", err)
	}
	pid := cmd.Process.Pid
	go func() { _ = cmd.Wait() }() // reap it, so it does not linger as a zombie
	if got := GroupMembers(pid); !slices.Contains(got, pid) {
		t.Fatalf("group %d members %v, want %d among them", pid, got, pid)
	}
	KillGroup(pid)
	if got := GroupMembers(pid); len(got) != 0 {
		t.Fatalf("group %d still has %v after KillGroup", pid, got)
	}
}
