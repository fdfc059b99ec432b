package wanemu

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// openTUN creates a TUN device (IFF_TUN|IFF_NO_PI) named ifname inside the
// namespace and returns its non-blocking fd. The device lives as long as fd.
func openTUN(netns, ifname string) (int, error) {
	fd := -1
	err := InNetns(netns, func() error {
		var err error
		fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(ifname)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", ifname, err)
		}
		return nil
	})
	return fd, err
}
