package wanemu

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetnsPath is where `ip netns` keeps named namespaces.
const NetnsPath = "/var/run/netns/"

// AddNetns creates a named network namespace with loopback up. It uses
// `ip netns add`, which also makes /var/run/netns a shared mount point the
// first time, so the namespace's bind mount is seen by every process (the
// part that is easy to get wrong by hand); devices, addresses and routes
// are then set over netlink.
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

// handleIn opens a netlink handle on a named namespace.
func handleIn(netnsName string) (*netlink.Handle, error) {
	ns, err := netns.GetFromPath(NetnsPath + netnsName)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", netnsName, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", netnsName, err)
	}
	return h, nil
}

// TxDropped returns the TX drop counter of a device in a namespace: the TUN
// ring overflowing because the emulator fell behind (docs/lab.md, pitfalls).
func TxDropped(netnsName, ifname string) (uint64, error) {
	h, err := handleIn(netnsName)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	link, err := h.LinkByName(ifname)
	if err != nil {
		return 0, fmt.Errorf("%s in %s: %w", ifname, netnsName, err)
	}
	st := link.Attrs().Statistics
	if st == nil {
		return 0, fmt.Errorf("%s in %s: no statistics", ifname, netnsName)
	}
	return st.TxDropped, nil
}

// AddAddr puts addr/32 on a device (idempotent).
func AddAddr(netnsName, ifname, addr string) error {
	h, err := handleIn(netnsName)
	if err != nil {
		return err
	}
	defer h.Close()
	return addAddr(h, netnsName, ifname, addr)
}

func addAddr(h *netlink.Handle, netnsName, ifname, addr string) error {
	link, err := h.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", ifname, netnsName, err)
	}
	ipn, err := hostNet(addr)
	if err != nil {
		return err
	}
	if err := h.AddrReplace(link, &netlink.Addr{IPNet: ipn}); err != nil {
		return fmt.Errorf("address %s on %s in %s: %w", addr, ifname, netnsName, err)
	}
	return nil
}

func hostNet(addr string) (*net.IPNet, error) {
	ip := net.ParseIP(addr).To4()
	if ip == nil {
		return nil, fmt.Errorf("address %q: want IPv4", addr)
	}
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(32, 32)}, nil
}

// SetSysctl writes a network sysctl (e.g. "net.ipv4.tcp_rmem") inside a
// namespace. /proc/sys/net shows the namespace of the thread that opens it,
// so the write happens on a thread inside netns. Set buffer sysctls before
// starting listeners there: accepted sockets inherit the listener's buffers
// (docs/lab.md, pitfalls).
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
