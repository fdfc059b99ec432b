package registry

import (
	"context"
	"fmt"

	"github.com/hashicorp/consul/api"
)

// ConsulCRLKey holds the fleet's revocation list (PEM, signed by the
// operator's CA: relayctl ca revoke --consul) for relays on identities to
// read. A Consul writer can withhold or replace it, never forge one: a
// relay takes only a list its CA signed, and no list un-revokes.
const ConsulCRLKey = "relaymesh/crl"

// CRLSource is a registry that carries the fleet's revocation list.
type CRLSource interface {
	// CRL returns the list as published (nil when there is none).
	CRL(ctx context.Context) ([]byte, error)
}

// CRL reads ConsulCRLKey.
func (c *Consul) CRL(ctx context.Context) ([]byte, error) {
	kv, _, err := c.client.KV().Get(ConsulCRLKey, (&api.QueryOptions{AllowStale: true}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("consul %s: read %s: %w", c.addr, ConsulCRLKey, err)
	}
	if kv == nil {
		return nil, nil
	}
	return kv.Value, nil
}

// PublishCRL writes crl (PEM) at ConsulCRLKey of the Consul agent at addr,
// with token (empty: $CONSUL_HTTP_TOKEN, else anonymous; it needs key:write
// on the key).
func PublishCRL(ctx context.Context, addr, token string, crl []byte) error {
	c, err := newConsul(ConsulOptions{Addr: addr, Token: token})
	if err != nil {
		return err
	}
	if _, err := c.client.KV().Put(&api.KVPair{Key: ConsulCRLKey, Value: crl}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("consul %s: write %s: %w", c.addr, ConsulCRLKey, err)
	}
	return nil
}
