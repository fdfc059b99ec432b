// Package envvar names the environment variables that carry settings from
// one relaymesh program to another, in one place. `relayctl lab` sets the
// lab's values in every command it runs in a lab; relayctl reads them as the
// defaults of its flags, so commands inside a lab need none.
package envvar

const (
	// Fleet is the fleet file relayctl reads when --fleet is not given.
	Fleet = "RELAYMESH_FLEET"
	// FleetSecretFile is the fleet secret file relayctl reads when
	// --fleet-secret-file is not given.
	FleetSecretFile = "RELAYMESH_FLEET_SECRET_FILE"
	// IdentityCert is the relayctl user's certificate from the fleet's
	// operator CA (relayctl ca issue --role client), read when
	// --identity-cert is not given; its key and the CA's certificate are
	// found beside it unless named.
	IdentityCert = "RELAYMESH_IDENTITY_CERT"
	// Transport is the relay-link transport (tls or plain) relayctl
	// assumes when --transport is not given.
	Transport = "RELAYMESH_TRANSPORT"
	// Consul is the Consul agent's HTTP address relayctl reads when no
	// registry flag is given and no fleet file is set (a lab whose
	// registry is Consul sets it).
	Consul = "RELAYMESH_CONSUL"
	// AdminToken is the relays' admin API token relayctl reads when the
	// registry does not carry it (Consul).
	AdminToken = "RELAYMESH_ADMIN_TOKEN"
	// Lab names the lab a command runs in.
	Lab = "RELAYMESH_LAB"
	// ConsulBin is the consul binary the tests run as their agent, in
	// place of bin/consul.
	ConsulBin = "RELAYMESH_CONSUL_BIN"
)
