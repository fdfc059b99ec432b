package wanemu

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// openTUN creates a TUN device (IFF_TUN|IFF_NO_PI) named ifname inside the
// namespace and returns its non-blocking fd. The device lives as long as fd.
// With offload, packets carry a virtio_net_hdr and the kernel may send and
// take TCP/IPv4 super-packets with partial checksums (vnet.go).
func openTUN(netns, ifname string, offload bool) (int, error) {
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
		flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if offload {
			flags |= unix.IFF_VNET_HDR
		}
		ifr.SetUint16(flags)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", ifname, err)
		}
		if offload {
			if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tunFCsum|tunFTSO4); err != nil {
				unix.Close(fd)
				return fmt.Errorf("TUNSETOFFLOAD %s: %w", ifname, err)
			}
		}
		return nil
	})
	return fd, err
}
