package wanemu

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// superPacket builds a TCP/IPv4 packet with payloadLen bytes, TCP options
// (12 bytes, like timestamps) and the given flags, as the kernel hands a
// TSO burst to a TUN: total length set, partial checksum.
func superPacket(seq uint32, payloadLen int, flags byte) []byte {
	const iph, tcph = 20, 32
	p := make([]byte, iph+tcph+payloadLen)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	binary.BigEndian.PutUint16(p[4:], 1000) // IP ID
	p[6] = 0x40                             // DF
	p[8], p[9] = 64, 6
	copy(p[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	ipv4Checksum(p[:iph])
	t := p[iph:]
	binary.BigEndian.PutUint16(t[0:], 40000)
	binary.BigEndian.PutUint16(t[2:], 8000)
	binary.BigEndian.PutUint32(t[4:], seq)
	binary.BigEndian.PutUint32(t[8:], 777)
	t[12] = tcph / 4 << 4
	t[13] = flags
	binary.BigEndian.PutUint16(t[14:], 512)
	copy(t[20:], []byte{1, 1, 8, 10, 0, 0, 0, 42, 0, 0, 0, 43})
	for i := range payloadLen {
		p[iph+tcph+i] = byte(i * 7)
	}
	binary.BigEndian.PutUint16(t[16:], tcp4PseudoSum(p[:iph], len(p)-iph))
	return p
}

func ipHeaderValid(ip []byte) bool { return foldSum(sum16(ip[:20], 0)) == 0xffff }

func TestGSOSplitAndJoin(t *testing.T) {
	const mss = 1448
	payload := 3*mss + 500
	pkt := superPacket(5000, payload, tcpFlagACK|tcpFlagPSH|tcpFlagCWR)
	h := vnetHdr{flags: vnetFlagNeedsCsum, gsoType: vnetGSOTCPv4, gsoSize: mss, csumStart: 20, csumOffset: 16}
	n, err := gsoSegments(pkt, h)
	if err != nil || n != 4 {
		t.Fatalf("gsoSegments = %d, %v; want 4", n, err)
	}
	var segs [][]byte
	for i := range n {
		buf := make([]byte, 2048)
		m := gsoSegment(buf, pkt, mss, i)
		seg := buf[:m]
		segs = append(segs, seg)
		wantPay := mss
		if i == 3 {
			wantPay = 500
		}
		if m != 52+wantPay || int(binary.BigEndian.Uint16(seg[2:])) != m {
			t.Fatalf("segment %d: %d bytes, IP length %d; want %d", i, m, binary.BigEndian.Uint16(seg[2:]), 52+wantPay)
		}
		if !ipHeaderValid(seg) {
			t.Errorf("segment %d: IP header checksum wrong", i)
		}
		if got := binary.BigEndian.Uint32(seg[24:]); got != 5000+uint32(i*mss) {
			t.Errorf("segment %d: seq %d, want %d", i, got, 5000+i*mss)
		}
		if got := binary.BigEndian.Uint16(seg[4:]); got != 1000+uint16(i) {
			t.Errorf("segment %d: IP ID %d, want %d", i, got, 1000+i)
		}
		flags := seg[33]
		wantFlags := byte(tcpFlagACK)
		if i == 0 {
			wantFlags |= tcpFlagCWR
		}
		if i == 3 {
			wantFlags |= tcpFlagPSH
		}
		if flags != wantFlags {
			t.Errorf("segment %d: flags %#x, want %#x", i, flags, wantFlags)
		}
		if got := binary.BigEndian.Uint16(seg[36:]); got != tcp4PseudoSum(seg, m-20) {
			t.Errorf("segment %d: partial checksum %#x, want the pseudo-header sum %#x", i, got, tcp4PseudoSum(seg, m-20))
		}
		if !bytes.Equal(seg[52:], pkt[52+i*mss:52+i*mss+wantPay]) {
			t.Errorf("segment %d: payload differs", i)
		}
	}
	// CWR on the first segment: the kernel's GRO would not join it, nor do we.
	if canJoin(segs[0], segs[0], segs[1], len(segs[0]), 1) {
		t.Error("joined a CWR segment")
	}
	segs[0][33] = tcpFlagACK
	run := 1
	for run < len(segs) && canJoin(segs[0], segs[run-1], segs[run], 52+run*mss, run) {
		run++
	}
	if run != 4 {
		t.Fatalf("joined %d of 4 consecutive segments", run)
	}
	out := make([]byte, vnetHdrLen+maxSuperBytes)
	m := joinSegments(out, segs)
	var jh vnetHdr
	jh.decode(out)
	if jh.gsoType != vnetGSOTCPv4 || jh.gsoSize != mss || jh.flags != vnetFlagNeedsCsum || jh.csumStart != 20 || jh.csumOffset != 16 || jh.hdrLen != 52 {
		t.Errorf("joined header %+v", jh)
	}
	joined := out[vnetHdrLen:m]
	if !ipHeaderValid(joined) || int(binary.BigEndian.Uint16(joined[2:])) != len(pkt) {
		t.Errorf("joined IP header: length %d (want %d), checksum valid %v", binary.BigEndian.Uint16(joined[2:]), len(pkt), ipHeaderValid(joined))
	}
	if joined[33] != tcpFlagACK|tcpFlagPSH {
		t.Errorf("joined flags %#x: want the last segment's (ACK|PSH)", joined[33])
	}
	if !bytes.Equal(joined[20:32], pkt[20:32]) || !bytes.Equal(joined[52:], pkt[52:]) {
		t.Error("joined packet differs from the original super-packet")
	}
}

func TestCanJoinRefuses(t *testing.T) {
	a := superPacket(1, 1000, tcpFlagACK)
	for _, tc := range []struct {
		name string
		next []byte
	}{
		{"a gap in sequence", superPacket(1002, 1000, tcpFlagACK)},
		{"a larger segment", superPacket(1001, 1200, tcpFlagACK)},
		{"FIN", superPacket(1001, 1000, tcpFlagACK|tcpFlagFIN)},
		{"no payload", superPacket(1001, 0, tcpFlagACK)},
		{"another flow", func() []byte { p := superPacket(1001, 1000, tcpFlagACK); p[21]++; return p }()},
		{"another ACK number", func() []byte { p := superPacket(1001, 1000, tcpFlagACK); p[31]++; return p }()},
		{"other TCP options", func() []byte { p := superPacket(1001, 1000, tcpFlagACK); p[47]++; return p }()},
		{"not TCP", func() []byte { p := superPacket(1001, 1000, tcpFlagACK); p[9] = 17; return p }()},
	} {
		if canJoin(a, a, tc.next, len(a), 1) {
			t.Errorf("%s: joined", tc.name)
		}
	}
	if !canJoin(a, a, superPacket(1001, 1000, tcpFlagACK|tcpFlagPSH), len(a), 1) {
		t.Error("the next segment in order, with PSH: not joined")
	}
	if small := superPacket(1, 500, tcpFlagACK); canJoin(small, small, superPacket(501, 500, tcpFlagACK), len(small), 1) == false {
		t.Error("two equal segments: not joined")
	}
	last := superPacket(1001, 600, tcpFlagACK)
	if canJoin(a, last, superPacket(1601, 600, tcpFlagACK), 2*len(a), 2) {
		t.Error("joined after a short segment (only the last may be short)")
	}
}

func TestGSOSegmentsRefusesOtherKinds(t *testing.T) {
	pkt := superPacket(1, 3000, tcpFlagACK)
	if _, err := gsoSegments(pkt, vnetHdr{gsoType: 3 /* UDP */, gsoSize: 1448}); err == nil {
		t.Error("UDP GSO accepted")
	}
	if _, err := gsoSegments(pkt, vnetHdr{gsoType: vnetGSOTCPv4}); err == nil {
		t.Error("gso_size 0 accepted")
	}
	pkt[0] = 0x60
	if _, err := gsoSegments(pkt, vnetHdr{gsoType: vnetGSOTCPv4, gsoSize: 1448}); err == nil {
		t.Error("IPv6 accepted as TCPv4")
	}
}
