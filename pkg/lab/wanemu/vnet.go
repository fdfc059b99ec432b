package wanemu

import (
	"encoding/binary"
	"errors"
)

// TUN offloads. With IFF_VNET_HDR every packet read from or written to a TUN
// starts with a virtio_net_hdr, and TUNSETOFFLOAD lets the kernel hand over
// (and take) TCP "super-packets" of up to 64 KiB: a sender's TSO burst of
// ~45 segments costs one read instead of 45, and a run of segments written
// as one costs one write and one pass through the receiving stack (as GRO
// does behind a real NIC). The engine cuts super-packets into MTU-sized
// segments on read, because delay, rate, loss and jitter are decided per
// packet, and joins consecutive due segments of one TCP flow on write.
//
// Checksums are never computed here: packets carry the kernel's "partial"
// checksum (VIRTIO_NET_HDR_F_NEEDS_CSUM: the field holds the pseudo-header
// sum, the rest is left to whoever sends the packet on a wire), and a stack
// that receives such a packet delivers it without verifying. Only the IPv4
// header checksum, which every receiver checks, is recomputed when a header
// changes.

const (
	vnetHdrLen = 10 // sizeof(struct virtio_net_hdr), the TUN default

	vnetFlagNeedsCsum = 1

	vnetGSONone  = 0
	vnetGSOTCPv4 = 1
	vnetGSOECN   = 0x80

	// TUNSETOFFLOAD flags (linux/if_tun.h).
	tunFCsum = 0x01
	tunFTSO4 = 0x02

	// maxSuperBytes bounds a super-packet: the IPv4 total length field.
	maxSuperBytes = 65535
	// maxSuperSegs bounds the segments joined into one write (the kernel's
	// own GRO stops at 64 too).
	maxSuperSegs = 64

	tcpFlagFIN = 0x01
	tcpFlagSYN = 0x02
	tcpFlagRST = 0x04
	tcpFlagPSH = 0x08
	tcpFlagACK = 0x10
	tcpFlagCWR = 0x80
)

// vnetHdr is struct virtio_net_hdr (little-endian on every TUN this runs on).
type vnetHdr struct {
	flags      uint8
	gsoType    uint8
	hdrLen     uint16
	gsoSize    uint16
	csumStart  uint16
	csumOffset uint16
}

func (h *vnetHdr) decode(b []byte) {
	h.flags, h.gsoType = b[0], b[1]
	h.hdrLen = binary.LittleEndian.Uint16(b[2:])
	h.gsoSize = binary.LittleEndian.Uint16(b[4:])
	h.csumStart = binary.LittleEndian.Uint16(b[6:])
	h.csumOffset = binary.LittleEndian.Uint16(b[8:])
}

func (h *vnetHdr) encode(b []byte) {
	b[0], b[1] = h.flags, h.gsoType
	binary.LittleEndian.PutUint16(b[2:], h.hdrLen)
	binary.LittleEndian.PutUint16(b[4:], h.gsoSize)
	binary.LittleEndian.PutUint16(b[6:], h.csumStart)
	binary.LittleEndian.PutUint16(b[8:], h.csumOffset)
}

var errUnsupportedGSO = errors.New("unsupported GSO packet")

// tcp4Layout checks that pkt is an unfragmented TCP/IPv4 packet and returns
// its IP and TCP header lengths.
func tcp4Layout(pkt []byte) (ipHdrLen, tcpHdrLen int, ok bool) {
	if len(pkt) < 40 || pkt[0]>>4 != 4 || pkt[9] != 6 {
		return 0, 0, false
	}
	ipHdrLen = int(pkt[0]&0x0f) * 4
	if ipHdrLen < 20 || len(pkt) < ipHdrLen+20 {
		return 0, 0, false
	}
	if binary.BigEndian.Uint16(pkt[6:])&0x3fff != 0 { // MF or a fragment offset
		return 0, 0, false
	}
	tcpHdrLen = int(pkt[ipHdrLen+12]>>4) * 4
	if tcpHdrLen < 20 || len(pkt) < ipHdrLen+tcpHdrLen {
		return 0, 0, false
	}
	return ipHdrLen, tcpHdrLen, true
}

// gsoSegments returns how many segments a TCP/IPv4 super-packet holds, or an
// error for any other kind (the engine enables TSO4 only, so the kernel
// sends no other).
func gsoSegments(pkt []byte, h vnetHdr) (int, error) {
	if h.gsoType&^vnetGSOECN != vnetGSOTCPv4 || h.gsoSize == 0 {
		return 0, errUnsupportedGSO
	}
	iph, tcph, ok := tcp4Layout(pkt)
	if !ok {
		return 0, errUnsupportedGSO
	}
	payload := len(pkt) - iph - tcph
	return max(1, (payload+int(h.gsoSize)-1)/int(h.gsoSize)), nil
}

// gsoSegment writes segment i of a TCP/IPv4 super-packet into dst (which
// must hold headers plus gsoSize bytes) and returns its length, as the
// kernel's TCP segmentation would: sequence number advanced, FIN and PSH on
// the last segment only, CWR on the first only, IP length, ID and header
// checksum per segment, and the TCP checksum field holding the segment's
// pseudo-header sum (the segment keeps a partial checksum).
func gsoSegment(dst, pkt []byte, gsoSize, i int) int {
	iph, tcph, _ := tcp4Layout(pkt)
	hdrs := iph + tcph
	payload := pkt[hdrs:]
	off := i * gsoSize
	end := min(off+gsoSize, len(payload))
	n := copy(dst, pkt[:hdrs])
	n += copy(dst[n:], payload[off:end])
	ip, tcp := dst[:iph], dst[iph:hdrs]
	binary.BigEndian.PutUint16(ip[2:], uint16(n))
	binary.BigEndian.PutUint16(ip[4:], binary.BigEndian.Uint16(pkt[4:])+uint16(i))
	ipv4Checksum(ip)
	binary.BigEndian.PutUint32(tcp[4:], binary.BigEndian.Uint32(pkt[iph+4:])+uint32(off))
	flags := tcp[13]
	if end < len(payload) {
		flags &^= tcpFlagFIN | tcpFlagPSH
	}
	if i > 0 {
		flags &^= tcpFlagCWR
	}
	tcp[13] = flags
	binary.BigEndian.PutUint16(tcp[16:], tcp4PseudoSum(ip, n-iph))
	return n
}

// ipv4Checksum recomputes the header checksum of an IPv4 header.
func ipv4Checksum(ip []byte) {
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], ^foldSum(sum16(ip, 0)))
}

// tcp4PseudoSum is the folded (not inverted) pseudo-header sum a partial TCP
// checksum holds: what the kernel puts in th->check for CHECKSUM_PARTIAL.
func tcp4PseudoSum(ip []byte, tcpLen int) uint16 {
	s := sum16(ip[12:20], 0) + 6 + uint32(tcpLen)
	return foldSum(s)
}

func sum16(b []byte, s uint32) uint32 {
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

func foldSum(s uint32) uint16 {
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// canJoin says whether segment next may follow the run that starts with
// first and ends with last in one super-packet: the rules of the kernel's
// own TCP GRO (same flow, contiguous sequence numbers, same ACK, TOS, TTL
// and TCP options, plain ACK flags with PSH only at the end, every segment
// but the last full-sized). runBytes and runSegs are the run's size so far.
func canJoin(first, last, next []byte, runBytes, runSegs int) bool {
	if runSegs >= maxSuperSegs {
		return false
	}
	fi, ft, ok := tcp4Layout(first)
	if !ok || fi != 20 {
		return false
	}
	ni, nt, ok := tcp4Layout(next)
	if !ok || ni != 20 || nt != ft {
		return false
	}
	mss := len(first) - fi - ft
	lastPay := len(last) - fi - ft
	nextPay := len(next) - ni - nt
	if mss == 0 || nextPay == 0 || nextPay > mss || lastPay != mss {
		return false
	}
	if runBytes+nextPay > maxSuperBytes {
		return false
	}
	if last[fi+13] != tcpFlagACK || (next[ni+13] != tcpFlagACK && next[ni+13] != tcpFlagACK|tcpFlagPSH) {
		return false
	}
	// TOS, TTL, protocol, addresses; ports; ACK number; options.
	if first[1] != next[1] || first[8] != next[8] || string(first[12:20]) != string(next[12:20]) ||
		string(first[20:24]) != string(next[20:24]) || string(first[28:32]) != string(next[28:32]) ||
		string(first[40:20+ft]) != string(next[40:20+nt]) {
		return false
	}
	lastSeq := binary.BigEndian.Uint32(last[fi+4:])
	return binary.BigEndian.Uint32(next[ni+4:]) == lastSeq+uint32(lastPay)
}

// joinSegments writes vnet header and one TCP/IPv4 super-packet made of
// segs (consecutive segments that canJoin accepted) into dst and returns its
// length. The headers are the first segment's, with the last one's flags
// (PSH) and window, and the total length.
func joinSegments(dst []byte, segs [][]byte) int {
	first, last := segs[0], segs[len(segs)-1]
	_, tcph, _ := tcp4Layout(first)
	hdrs := 20 + tcph
	n := vnetHdrLen
	n += copy(dst[n:], first[:hdrs])
	for _, s := range segs {
		n += copy(dst[n:], s[hdrs:])
	}
	pkt := dst[vnetHdrLen:n]
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	ipv4Checksum(pkt[:20])
	pkt[20+13] = last[20+13]
	copy(pkt[20+14:20+16], last[20+14:20+16])
	binary.BigEndian.PutUint16(pkt[20+16:], tcp4PseudoSum(pkt[:20], len(pkt)-20))
	h := vnetHdr{flags: vnetFlagNeedsCsum, gsoType: vnetGSOTCPv4, hdrLen: uint16(hdrs),
		gsoSize: uint16(len(first) - hdrs), csumStart: 20, csumOffset: 16}
	h.encode(dst)
	return n
}
