package relay

import (
	"context"
	"github.com/relaymesh/relaymesh/pkg/adminapi/adminapitest"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/relaymesh/relaymesh/pkg/tunnel"
)

// A relay's /v1/info has exactly the keys it had (and in their order):
// the learnt-loss pair only once a loss to the asker's host was learnt,
// and never for a request another relay forwarded.
func TestInfoKeys(t *testing.T) {
	base := []string{"active", "capacity_bps", "congestion_control", "fleet", "http",
		"learnt_send_age_s", "learnt_send_bps_to_you", "limits", "max_stripes", "name", "next", "region", "relay", "socks", "version"}
	withLoss := []string{"active", "capacity_bps", "congestion_control", "fleet", "http",
		"learnt_loss_age_s", "learnt_loss_to_you",
		"learnt_send_age_s", "learnt_send_bps_to_you", "limits", "max_stripes", "name", "next", "region", "relay", "socks", "version"}
	limits := []string{"rmem_max_bytes", "wmem_max_bytes", "tcp_rmem_max_bytes", "tcp_wmem_max_bytes", "congestion_control", "window_bytes_approx"}

	s := startAdmin(t)
	keys := func(forwarded bool) []string {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "/v1/info", nil)
		req.RemoteAddr = "127.0.0.1:40000"
		req.Header.Set("Authorization", "Bearer "+s.cfg.AdminToken)
		if forwarded {
			req.Header.Set(forwardedHeader, "r0")
		}
		req = req.WithContext(context.WithValue(req.Context(), adminConnKey{}, &sniffConn{}))
		w := httptest.NewRecorder()
		s.adminSrv.Handler.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("/v1/info: %d %s", w.Code, w.Body)
		}
		top, vals := adminapitest.ObjectKeys(t, w.Body.Bytes())
		if lk, _ := adminapitest.ObjectKeys(t, vals["limits"]); !reflect.DeepEqual(lk, limits) {
			t.Errorf("limits' keys %q, want %q", lk, limits)
		}
		return top
	}
	if got := keys(false); !reflect.DeepEqual(got, base) {
		t.Errorf("nothing learnt: keys %q, want %q", got, base)
	}
	s.learnt.AddLoss(netip.MustParseAddr("127.0.0.1"), time.Now(), tunnel.SocketStats{Valid: true, SentBytes: 4 << 20, RetransmittedBytes: 4096})
	if got := keys(false); !reflect.DeepEqual(got, withLoss) {
		t.Errorf("a loss learnt: keys %q, want %q", got, withLoss)
	}
	if got := keys(true); !reflect.DeepEqual(got, base) {
		t.Errorf("forwarded: keys %q, want %q", got, base)
	}
}
