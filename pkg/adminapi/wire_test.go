package adminapi_test

import (
	"bytes"
	"encoding/json"
	"github.com/relaymesh/relaymesh/pkg/adminapi/adminapitest"
	"reflect"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/adminapi"
	"github.com/relaymesh/relaymesh/pkg/probe"
	"github.com/relaymesh/relaymesh/pkg/udpask"
)

// infoKeys are /v1/info's keys, in the order the relay writes them, as
// they were when it built the answer as a map (sorted): the learnt-loss
// pair only when a loss was learnt.
var (
	infoKeys = []string{"active", "capacity_bps", "congestion_control", "fleet", "http",
		"learnt_send_age_s", "learnt_send_bps_to_you", "limits", "name", "next", "region", "relay", "socks", "version"}
	infoKeysWithLoss = []string{"active", "capacity_bps", "congestion_control", "fleet", "http",
		"learnt_loss_age_s", "learnt_loss_to_you",
		"learnt_send_age_s", "learnt_send_bps_to_you", "limits", "name", "next", "region", "relay", "socks", "version"}
	limitsKeys = []string{"rmem_max_bytes", "wmem_max_bytes", "tcp_rmem_max_bytes", "tcp_wmem_max_bytes", "congestion_control", "window_bytes_approx"}
)

func testInfo() adminapi.Info {
	return adminapi.Info{Active: 3, CapacityBps: 250e6, CongestionControl: "bbr", Fleet: "/etc/relaymesh/fleet.yaml",
		HTTP: "0.0.0.0:8080", LearntSendAgeSec: 12.5, LearntSendBpsToYou: 80e6,
		Limits: adminapi.Limits{RmemMaxBytes: 212992, WmemMaxBytes: 212992, TCPRmemMaxBytes: 6 << 20, TCPWmemMaxBytes: 4 << 20,
			CongestionControl: "cubic", WindowBytesApprox: 3774873},
		Name: "tokyo-1", Next: []string{"osaka-1"}, Region: "ap-northeast", Relay: "0.0.0.0:7000", SOCKS: "0.0.0.0:1080", Version: "v1.2.3"}
}

// mapInfo is info as relayd built /v1/info before adminapi.Info: a map,
// the limits a struct, the learnt-loss keys set only when learnt.
func mapInfo(info adminapi.Info) map[string]any {
	m := map[string]any{
		"name": info.Name, "region": info.Region, "version": info.Version, "socks": info.SOCKS, "http": info.HTTP,
		"relay": info.Relay, "next": info.Next, "active": info.Active, "fleet": info.Fleet, "limits": info.Limits,
		"capacity_bps": info.CapacityBps, "congestion_control": info.CongestionControl,
		"learnt_send_bps_to_you": info.LearntSendBpsToYou, "learnt_send_age_s": info.LearntSendAgeSec,
	}
	if loss, age, ok := info.LearntLoss(); ok {
		m["learnt_loss_to_you"], m["learnt_loss_age_s"] = loss, age
	}
	return m
}

// /v1/info has the keys it had, in the order it had them, the learnt
// loss's only when there is one (0 is one), and the bytes the map made.
func TestInfoJSONKeysAndBytes(t *testing.T) {
	lossless := testInfo()
	withLoss := testInfo()
	withLoss.SetLearntLoss(0.0125, 42)
	zeroLoss := testInfo()
	zeroLoss.SetLearntLoss(0, 7)
	for _, tc := range []struct {
		name string
		info adminapi.Info
		keys []string
	}{{"no loss learnt", lossless, infoKeys}, {"a loss learnt", withLoss, infoKeysWithLoss}, {"a loss of 0 learnt", zeroLoss, infoKeysWithLoss}} {
		got, err := json.Marshal(tc.info)
		if err != nil {
			t.Fatal(err)
		}
		keys, vals := adminapitest.ObjectKeys(t, got)
		if !reflect.DeepEqual(keys, tc.keys) {
			t.Errorf("%s: keys %q, want %q", tc.name, keys, tc.keys)
		}
		if lk, _ := adminapitest.ObjectKeys(t, vals["limits"]); !reflect.DeepEqual(lk, limitsKeys) {
			t.Errorf("%s: limits' keys %q, want %q", tc.name, lk, limitsKeys)
		}
		want, err := json.Marshal(mapInfo(tc.info))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the bytes changed:\n got %s\nwant %s", tc.name, got, want)
		}
		var back adminapi.Info
		if err := json.Unmarshal(got, &back); err != nil || !reflect.DeepEqual(back, tc.info) {
			t.Errorf("%s: decoded as %+v (%v), want %+v", tc.name, back, err, tc.info)
		}
	}
}

// /v1/probe's answer has the bytes the map made: target, addr and summary
// at the top with one target measured, info with info=1.
func TestProbeAnswerBytes(t *testing.T) {
	sum := &probe.Summary{Samples: 3, MinMs: 10, MedianMs: 11, P90Ms: 12, LastAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	one := adminapi.ProbeResult{Target: "example.com:443", Addr: "192.0.2.1:443", Summary: sum}
	bad := adminapi.ProbeResult{Target: "no-port", Error: `target "no-port": want host:port`}
	info := testInfo()
	for _, tc := range []struct {
		name string
		ans  adminapi.ProbeAnswer
		m    map[string]any
	}{
		{"one target", adminapi.ProbeAnswer{From: "r1", Results: []adminapi.ProbeResult{one}, Target: one.Target, Addr: one.Addr, Summary: sum},
			map[string]any{"from": "r1", "results": []adminapi.ProbeResult{one}, "target": one.Target, "addr": one.Addr, "summary": sum}},
		{"two, with info", adminapi.ProbeAnswer{From: "r1", Results: []adminapi.ProbeResult{one, bad}, Info: &info},
			map[string]any{"from": "r1", "results": []adminapi.ProbeResult{one, bad}, "info": mapInfo(info)}},
	} {
		got, _ := json.Marshal(tc.ans)
		want, _ := json.Marshal(tc.m)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the bytes changed:\n got %s\nwant %s", tc.name, got, want)
		}
	}
	got, _ := json.Marshal(adminapi.Tunnels{Tunnels: []adminapi.TunnelRecord{}})
	if want, _ := json.Marshal(map[string]any{"tunnels": []adminapi.TunnelRecord{}}); !bytes.Equal(got, want) {
		t.Errorf("/v1/tunnels: %s, want %s", got, want)
	}
}

// A UDP ask's reply carries the planner's fields of the relay's Info and
// no other: what the survey reads of a relay is the same over HTTPS and
// over UDP.
func TestInfoRoundTripsUDP(t *testing.T) {
	key, err := udpask.DeriveKey("a-fleet-secret-of-32-bytes-long!", "admin-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	planners := func(i adminapi.Info) adminapi.Info {
		p := adminapi.Info{CapacityBps: i.CapacityBps, CongestionControl: i.CongestionControl, MaxStripes: i.MaxStripes,
			LearntSendBpsToYou: i.LearntSendBpsToYou, LearntSendAgeSec: i.LearntSendAgeSec,
			Limits: adminapi.Limits{WindowBytesApprox: i.Limits.WindowBytesApprox, TCPWmemMaxBytes: i.Limits.TCPWmemMaxBytes}}
		if loss, age, ok := i.LearntLoss(); ok {
			p.SetLearntLoss(loss, age)
		}
		return p
	}
	withLoss := testInfo()
	withLoss.SetLearntLoss(0.125, 42) // float32-exact: the wire's
	zeroLoss := testInfo()
	zeroLoss.SetLearntLoss(0, 0)
	striping := testInfo()
	striping.MaxStripes = 8
	for name, info := range map[string]adminapi.Info{"no loss learnt": testInfo(), "a loss learnt": withLoss, "a loss of 0 learnt": zeroLoss,
		"stripes allowed": striping} {
		r, err := key.OpenReply(key.SealReply(udpask.Reply{Nonce: udpask.Nonce{1}, Info: &info}))
		if err != nil || r.Info == nil {
			t.Fatalf("%s: %+v, %v", name, r, err)
		}
		if want := planners(info); !reflect.DeepEqual(*r.Info, want) {
			t.Errorf("%s: came back as %+v, want %+v", name, *r.Info, want)
		}
	}
}
