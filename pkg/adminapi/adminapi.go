// Package adminapi is the contract of a relay's admin API. Client is the
// one way to reach it: HTTPS verified against the fleet CA on a TLS fleet,
// no redirects followed, the answer taken only from the relay asked.
package adminapi
