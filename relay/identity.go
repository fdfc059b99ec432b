package relay

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// crlEvery is how often a relay re-reads its identity's revocation list: a
// revoked relay or user is refused within it on new and pooled links.
const crlEvery = 10 * time.Second

// watchCRL re-reads identity.crl every crlEvery until ctx ends. A list that
// fails to read or verify leaves the last good one in force, logged once
// per failure; one past its NextUpdate is honoured and warned about once an
// hour (the operator should sign it afresh: relayctl ca revoke).
func (s *Server) watchCRL(ctx context.Context) {
	log := s.log.Named("identity").With(zap.String("crl", s.cfg.Identity.CRL))
	t := time.NewTicker(crlEvery)
	defer t.Stop()
	var lastErr string
	var staleSaid time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		stale, err := s.link.ReloadCRL()
		switch {
		case err != nil && err.Error() != lastErr:
			log.Warn("revocation list not re-read", zap.Error(err))
			lastErr = err.Error()
		case err == nil:
			lastErr = ""
		}
		if stale && time.Since(staleSaid) > time.Hour {
			log.Warn("revocation list is past its next update: still honoured; sign it afresh (relayctl ca revoke --dir CA) and copy it here")
			staleSaid = time.Now()
		}
	}
}
