package relay

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/relaymesh/relaymesh/pkg/registry"
)

// crlEvery is how often a relay re-reads its identity's revocation list
// (the file, and the registry's copy): a revoked relay or user is refused
// within it on new and pooled links and admin connections.
const crlEvery = 10 * time.Second

// crlSource is where this relay reads revocation lists from, besides the
// file: the registry, when it carries one (Consul). nil: none.
func (s *Server) crlSource() registry.CRLSource {
	if s.measure == nil {
		return nil
	}
	src, _ := s.measure.reg.(registry.CRLSource)
	return src
}

// watchesCRL reports whether this relay has a revocation list to follow.
func (s *Server) watchesCRL() bool {
	return s.link != nil && s.link.Issued() && (s.cfg.Identity.CRL != "" || s.crlSource() != nil)
}

// watchCRL re-reads the revocation lists every crlEvery until ctx ends. A
// list that fails to read or verify leaves what is revoked in force,
// logged once per failure; one past its NextUpdate is honoured and warned
// about once an hour (the operator should sign it afresh: relayctl ca
// revoke).
func (s *Server) watchCRL(ctx context.Context) {
	log := s.log.Named("identity").With(zap.String("crl", s.cfg.Identity.CRL))
	t := time.NewTicker(crlEvery)
	defer t.Stop()
	src := s.crlSource()
	lastErr := map[string]string{}
	var staleSaid time.Time
	say := func(from string, err error) {
		switch {
		case err != nil && err.Error() != lastErr[from]:
			log.Warn("revocation list not read", zap.String("from", from), zap.Error(err))
			lastErr[from] = err.Error()
		case err == nil:
			delete(lastErr, from)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		stale, err := s.link.ReloadCRL()
		say("file", err)
		if src != nil {
			rctx, cancel := context.WithTimeout(ctx, crlEvery)
			b, err := src.CRL(rctx)
			cancel()
			if err == nil && b != nil {
				// Staleness is the newest list's, whichever source.
				stale, err = s.link.ApplyCRL(b)
			}
			say("registry", err)
		}
		s.metrics.crlStale.Store(stale)
		if stale && time.Since(staleSaid) > time.Hour {
			log.Warn("revocation list is past its next update: still honoured; sign it afresh (relayctl ca revoke --dir CA) and publish it again")
			staleSaid = time.Now()
		}
	}
}
