package registry

import (
	"net/http"
	"time"
)

// AdminClient is the HTTP client for relays' admin APIs. It never follows a
// redirect: its requests carry the fleet's admin token, and a relay (or
// whoever registered a relay's admin address) answering 3xx must neither
// have the token sent on (Go keeps it for another port of the same host)
// nor make this host fetch a URL of its choosing, a cloud metadata service
// say. A redirect is answered as what it is: a non-200 status.
func AdminClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
