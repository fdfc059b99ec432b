package wanemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// NetnsPath is where `ip netns` keeps named namespaces.
const NetnsPath = "/var/run/netns/"

// AddNetns creates a named network namespace with loopback up.
func AddNetns(name string) error {
	if err := run("ip", "netns", "add", name); err != nil {
		return err
	}
	return run("ip", "-n", name, "link", "set", "lo", "up")
}

// DelNetns removes a named network namespace (its TUNs vanish with their fds).
func DelNetns(name string) error { return run("ip", "netns", "del", name) }

// InNetns runs f on a locked OS thread that is inside the namespace. Sockets
// and devices created in f belong to that namespace for their lifetime.
func InNetns(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is not unlocked when setns back fails, so the runtime
		// throws it away instead of reusing a thread in the wrong namespace.
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(NetnsPath + name)
		if err != nil {
			errc <- fmt.Errorf("netns %s: %w", name, err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns back: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// TxDropped returns the TX drop counter of a device in a namespace: the TUN
// ring overflowing because the emulator fell behind (TESTBED.md pitfall 3).
func TxDropped(netns, ifname string) (uint64, error) {
	out, err := exec.Command("ip", "-n", netns, "-j", "-s", "link", "show", "dev", ifname).Output()
	if err != nil {
		return 0, fmt.Errorf("ip -n %s link show %s: %w", netns, ifname, err)
	}
	var v []struct {
		Stats64 struct {
			Tx struct {
				Dropped uint64 `json:"dropped"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &v); err != nil || len(v) != 1 {
		return 0, fmt.Errorf("ip -j output for %s: %v", ifname, err)
	}
	return v[0].Stats64.Tx.Dropped, nil
}

// SetSysctl writes a network sysctl (e.g. "net.ipv4.tcp_rmem") inside a
// namespace. /proc/sys/net shows the namespace of the thread that opens it,
// so the write happens on a thread inside netns. Set buffer sysctls before
// starting listeners there: accepted sockets inherit the listener's buffers
// (TESTBED.md pitfall 6).
//
// A namespace other than the initial one may only pick a default congestion
// control that the host lists in net.ipv4.tcp_allowed_congestion_control
// (the kernel answers EPERM otherwise). For that key, SetSysctl adds the
// algorithm to the host's allowed list (which only lets unprivileged sockets
// choose it too; the host's own default is untouched) and retries.
func SetSysctl(netns, key, value string) error {
	err := writeSysctl(netns, key, value)
	if errors.Is(err, fs.ErrPermission) && key == "net.ipv4.tcp_congestion_control" {
		if aerr := allowCongestionControl(value); aerr != nil {
			return fmt.Errorf("%w (and allowing it on the host: %v)", err, aerr)
		}
		err = writeSysctl(netns, key, value)
	}
	return err
}

func writeSysctl(netns, key, value string) error {
	path := sysctlPath(key)
	return InNetns(netns, func() error {
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%q in %s: %w", key, value, netns, err)
		}
		return nil
	})
}

func sysctlPath(key string) string { return "/proc/sys/" + strings.ReplaceAll(key, ".", "/") }

func allowCongestionControl(algo string) error {
	path := sysctlPath("net.ipv4.tcp_allowed_congestion_control")
	cur, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	list := strings.Fields(string(cur))
	if slices.Contains(list, algo) {
		return nil
	}
	return os.WriteFile(path, []byte(strings.Join(append(list, algo), " ")), 0o644)
}
