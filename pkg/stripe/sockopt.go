package stripe

import (
	"net"

	"golang.org/x/sys/unix"

	"github.com/relaymesh/relaymesh/pkg/hostnet"
	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// LinkUnsentBytes bounds what each link's socket holds that it has not
// sent yet (TCP_NOTSENT_LOWAT): a link's writer takes the next chunk only
// once its socket is sending what it has. Without it a link that loss
// slowed takes chunks into its send buffer (autotuned to megabytes) as
// fast as the others, and the receiver, putting the stream back in order,
// waits on those chunks while the fast links' fill its window. A few
// chunks' worth keeps every link's congestion window fed between two
// wakings of its writer.
const LinkUnsentBytes = 128 << 10

// boundUnsent sets LinkUnsentBytes on the TCP socket under l; a link that
// is not over TCP (a test's pipe) is left as it is.
func boundUnsent(l net.Conn) error {
	tc, ok := tunnel.TCPUnder(l)
	if !ok {
		return nil
	}
	return hostnet.SetIntOn(tc, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, LinkUnsentBytes)
}
