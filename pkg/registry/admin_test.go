package registry

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A relay's admin API answering with a redirect gets neither the token
// sent on nor a request made where it points (a planted registration's
// admin address redirecting to a metadata service, say).
func TestAdminClientNoRedirects(t *testing.T) {
	var hits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer target.Close()
	liar := httptest.NewServer(http.RedirectHandler(target.URL+"/latest/meta-data/", http.StatusFound))
	defer liar.Close()
	req, _ := http.NewRequest(http.MethodGet, liar.URL+"/v1/info", nil)
	req.Header.Set("Authorization", "Bearer fleet-admin-token")
	resp, err := AdminClient(5 * time.Second).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || hits.Load() != 0 {
		t.Fatalf("status %d, redirect target hit %d times: want the 302 itself and no request", resp.StatusCode, hits.Load())
	}
}
