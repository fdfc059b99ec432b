package udpask

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
)

func testKey(t *testing.T, secret, token string) Key {
	t.Helper()
	k, err := DeriveKey(secret, token)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestAskAckReplyRoundTrip(t *testing.T) {
	k := testKey(t, "a-fleet-secret-of-32-bytes-long!", "admin-token-0123456789")
	at := time.UnixMilli(1_800_000_000_123)
	a := Ask{Relay: "tokyo-1", Nonce: Nonce{1, 2, 3}, At: at, Handshakes: 3, TimeoutMs: 2500, Targets: []string{"198.51.100.7:9090", "[2001:db8::1]:443"}}
	b, err := k.SealAsk(a)
	if err != nil {
		t.Fatal(err)
	}
	got, err := k.OpenAsk(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Relay != a.Relay || got.Nonce != a.Nonce || !got.At.Equal(at) || got.Handshakes != 3 || got.TimeoutMs != 2500 || strings.Join(got.Targets, ",") != strings.Join(a.Targets, ",") {
		t.Errorf("ask came back as %+v, want %+v", got, a)
	}
	if n, err := k.OpenAck(k.SealAck(a.Nonce)); err != nil || n != a.Nonce {
		t.Errorf("ack: %v, %v", n, err)
	}
	r := Reply{Nonce: a.Nonce, RTTs: []time.Duration{12345 * time.Microsecond, -1}, Recv: []Learnt{{Bps: 48.25e6, AgeSec: 42}}}
	gotR, err := k.OpenReply(k.SealReply(r))
	if err != nil || gotR.Nonce != a.Nonce || len(gotR.RTTs) != 2 || gotR.RTTs[0] != r.RTTs[0] || gotR.RTTs[1] >= 0 || gotR.Info != nil {
		t.Errorf("reply came back as %+v (%v), want %+v", gotR, err, r)
	}
	if want := []Learnt{{Bps: 48.25e6, AgeSec: 42}, {}}; len(gotR.Recv) != 2 || gotR.Recv[0] != want[0] || gotR.Recv[1] != want[1] {
		t.Errorf("learnt rates came back as %+v, want %+v", gotR.Recv, want)
	}
	// With the relay's windows, for an ask of them that names no target.
	info := adminapi.Info{Limits: adminapi.Limits{WindowBytesApprox: 3 << 20, TCPWmemMaxBytes: 4 << 20}, CapacityBps: 250e6,
		LearntSendBpsToYou: 80e6, LearntSendAgeSec: 12.5, CongestionControl: "bbr", MaxStripes: 8}
	info.SetLearntLoss(float64(float32(0.0125)), 42) // the wire's float32
	b, err = k.SealAsk(Ask{Relay: "tokyo-1", Nonce: a.Nonce, At: at, Handshakes: 1, TimeoutMs: 1, Flags: FlagInfo})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k.OpenAsk(b); err != nil || got.Flags != FlagInfo || len(got.Targets) != 0 {
		t.Errorf("an ask for the windows alone came back as %+v (%v)", got, err)
	}
	withInfo := k.SealReply(Reply{Nonce: a.Nonce, Info: &info})
	if len(withInfo) > len(b) {
		t.Errorf("the windows' reply is %d bytes, the ask %d", len(withInfo), len(b))
	}
	if gotR, err := k.OpenReply(withInfo); err != nil || gotR.Info == nil || !reflect.DeepEqual(*gotR.Info, info) {
		t.Errorf("windows came back as %+v (%v), want %+v", gotR.Info, err, info)
	}
	// Each kind opens only as itself.
	if _, err := k.OpenReply(b); err == nil {
		t.Error("an ask opened as a reply")
	}
	if _, err := k.OpenAsk(k.SealAck(a.Nonce)); err == nil {
		t.Error("an ack opened as an ask")
	}
}

// Another fleet secret or admin token, or any byte changed: refused.
func TestForgedOrForeignAsksAreRefused(t *testing.T) {
	k := testKey(t, "a-fleet-secret-of-32-bytes-long!", "admin-token-0123456789")
	b, err := k.SealAsk(Ask{Relay: "r", At: time.Now(), Handshakes: 1, TimeoutMs: 1000, Targets: []string{"192.0.2.1:80"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []Key{
		testKey(t, "another-fleet-secret-of-32-bytes", "admin-token-0123456789"),
		testKey(t, "a-fleet-secret-of-32-bytes-long!", "admin-token-9876543210"),
	} {
		if _, err := other.OpenAsk(b); !errors.Is(err, ErrBadMAC) {
			t.Errorf("opened under another key: %v", err)
		}
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x40
		if _, err := k.OpenAsk(c); err == nil {
			t.Fatalf("byte %d changed: still opened", i)
		}
	}
	if _, err := k.OpenAsk(b[:len(b)-1]); err == nil {
		t.Error("a truncated ask opened")
	}
	if _, err := DeriveKey("", "token"); err == nil {
		t.Error("a key without a fleet secret")
	}
	if _, err := k.SealAsk(Ask{At: time.Now(), Handshakes: 1, TimeoutMs: 1000, Targets: []string{"192.0.2.1:80"}}); err == nil {
		t.Error("an ask that names no relay sealed")
	}
}

// An ask names the relay it is for, under the MAC: no byte of the name
// can be changed (the relay compares it with its own, relay/udpask.go).
func TestAskNamesItsRelay(t *testing.T) {
	k := testKey(t, "a-fleet-secret-of-32-bytes-long!", "admin-token-0123456789")
	b, err := k.SealAsk(Ask{Relay: "tokyo", At: time.Now(), Handshakes: 1, TimeoutMs: 1000, Targets: []string{"192.0.2.1:80"}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := k.OpenAsk(b)
	if err != nil || a.Relay != "tokyo" {
		t.Fatalf("opened for %q (%v), want tokyo", a.Relay, err)
	}
	i := strings.Index(string(b), "tokyo")
	c := append([]byte(nil), b...)
	copy(c[i:], "osaka")
	if _, err := k.OpenAsk(c); !errors.Is(err, ErrBadMAC) {
		t.Errorf("the name changed to osaka: %v, want a bad MAC", err)
	}
}

// A relay cannot amplify: the ack and the reply together, with the second
// datagram's headers, are never larger than the ask, down to targets of
// three bytes and up to a full datagram.
func TestAnswersAreNeverLargerThanTheAsk(t *testing.T) {
	k := testKey(t, "a-fleet-secret-of-32-bytes-long!", "admin-token-0123456789")
	for n := 1; n <= 255; n++ {
		targets := make([]string, n)
		for i := range targets {
			targets[i] = "a:1"
		}
		for _, flags := range []byte{0, FlagInfo} {
			if AskSize("r", targets, flags) > MaxDatagram {
				continue
			}
			b, err := k.SealAsk(Ask{Relay: "r", At: time.Now(), Handshakes: 1, TimeoutMs: 1, Flags: flags, Targets: targets})
			if err != nil {
				t.Fatal(err)
			}
			r := Reply{RTTs: make([]time.Duration, n)}
			if flags == FlagInfo {
				r.Info = &adminapi.Info{CongestionControl: strings.Repeat("c", 40)}
			}
			reply, ack := k.SealReply(r), k.SealAck(Nonce{})
			if sent := len(ack) + len(reply) + DatagramHeaderBytes; sent > len(b) {
				t.Fatalf("%d targets, flags %d: ask %d bytes, ack %d + reply %d + headers %d", n, flags, len(b), len(ack), len(reply), DatagramHeaderBytes)
			}
			if len(ack)+len(reply)+DatagramHeaderBytes != AnswerBytes(n, flags) {
				t.Fatalf("%d targets, flags %d: AnswerBytes %d, the answers take %d", n, flags, AnswerBytes(n, flags), len(ack)+len(reply)+DatagramHeaderBytes)
			}
			// An ask cut short of its answers' size is refused.
			if _, err := k.OpenAsk(k.mac2(b[:len(b)-macBytes-1])); err == nil && len(b)-1 < AnswerBytes(n, flags) {
				t.Fatalf("%d targets, flags %d: an ask smaller than its answers opened", n, flags)
			}
		}
	}
	if _, err := k.SealAsk(Ask{Relay: "r", At: time.Now(), Handshakes: 1, TimeoutMs: 1, Targets: []string{strings.Repeat("x", 255), strings.Repeat("y", 255), strings.Repeat("z", 255), strings.Repeat("w", 255), strings.Repeat("v", 255)}}); err == nil {
		t.Error("an ask over MaxDatagram sealed")
	}
}

func TestReplaysRefuseStaleRepeatedAndTooMany(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	r := NewReplays(2)
	ask := func(n byte, at time.Time) Ask { return Ask{Nonce: Nonce{n}, At: at} }
	if err := r.Admit(ask(1, now.Add(-Window-time.Second)), now); !errors.Is(err, ErrStale) {
		t.Errorf("an ask from 31 s ago: %v", err)
	}
	if err := r.Admit(ask(1, now.Add(Window+time.Second)), now); !errors.Is(err, ErrStale) {
		t.Errorf("an ask from 31 s ahead: %v", err)
	}
	if err := r.Admit(ask(1, now), now); err != nil {
		t.Fatal(err)
	}
	if err := r.Admit(ask(1, now), now.Add(time.Second)); !errors.Is(err, ErrReplay) {
		t.Errorf("the same nonce again: %v", err)
	}
	if err := r.Admit(ask(2, now), now); err != nil {
		t.Fatal(err)
	}
	if err := r.Admit(ask(3, now), now); !errors.Is(err, ErrBusy) {
		t.Errorf("a third nonce in the window with room for two: %v", err)
	}
	// Once the first two are out of the window they are forgotten.
	later := now.Add(Window + 2*time.Second)
	if err := r.Admit(ask(3, later), later); err != nil {
		t.Errorf("after the window: %v", err)
	}
}

// A client's ask with more targets than a datagram holds goes in several,
// each acknowledged and answered on its own, and the RTTs come back in the
// targets' order. The relay here is the test's, with this package's codec.
func TestClientSplitsAndReassembles(t *testing.T) {
	k := testKey(t, "a-fleet-secret-of-32-bytes-long!", "admin-token-0123456789")
	srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var datagrams atomic.Int32
	go func() {
		buf := make([]byte, MaxDatagram+1)
		for {
			n, from, err := srv.ReadFromUDP(buf)
			if err != nil {
				return
			}
			a, err := k.OpenAsk(buf[:n])
			if err != nil {
				continue
			}
			datagrams.Add(1)
			srv.WriteToUDP(k.SealAck(a.Nonce), from)
			r := Reply{Nonce: a.Nonce}
			for _, tg := range a.Targets {
				var ms int
				for _, c := range strings.TrimPrefix(strings.Split(tg, ":")[0], "t") {
					ms = ms*10 + int(c-'0')
				}
				r.RTTs = append(r.RTTs, time.Duration(ms)*time.Millisecond)
			}
			srv.WriteToUDP(k.SealReply(r), from)
		}
	}()
	c, err := NewClient(k)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var targets []string
	for i := range 100 {
		targets = append(targets, fmt.Sprintf("t%022d:9090", i)) // 29 bytes: about 38 a datagram
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := c.Ask(ctx, "r", srv.LocalAddr().String(), 1, time.Second, targets, false)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Acked():
	case <-ctx.Done():
		t.Fatal("no acknowledgement")
	}
	rtts, _, _, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range rtts {
		if d != time.Duration(i)*time.Millisecond {
			t.Fatalf("target %d: %v, want %d ms", i, d, i)
		}
	}
	if datagrams.Load() < 3 {
		t.Errorf("100 targets of 29 bytes went in %d datagrams", datagrams.Load())
	}
}

// mac2 signs an ask's body as SealAsk would, whatever it holds.
func (k Key) mac2(body []byte) []byte {
	return append(append([]byte(nil), body...), k.mac(body)...)
}
