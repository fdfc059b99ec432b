package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"
	"go.uber.org/zap"
)

func (c *Consul) serviceID() string { return ConsulServiceIDPrefix + c.opts.Self.Name }

// Register registers Self with the agent (again: it is idempotent).
func (c *Consul) Register(ctx context.Context) error {
	s := c.opts.Self
	if s == nil {
		return errors.New("consul: no relay to register")
	}
	addr := s.SOCKS
	if addr == "" {
		addr = s.HTTP
	}
	host, port := splitListen(addr)
	if host == "" {
		host = s.Advertise
	}
	meta := map[string]string{"name": s.Name}
	for k, v := range map[string]string{"region": s.Region, "socks": s.SOCKS, "http": s.HTTP, "admin": s.Admin, "relay": s.Relay} {
		if v != "" {
			meta[k] = v
		}
	}
	var tags []string
	if s.Region != "" {
		tags = append(tags, "region:"+s.Region)
	}
	checkURL := s.CheckURL
	if checkURL == "" && s.Admin != "" {
		h, p := splitListen(s.Admin)
		switch {
		case h == "" && s.Advertise != "":
			h = s.Advertise // a remote agent checks the address peers use
		case h == "":
			h = "127.0.0.1" // a wildcard admin listener answers the local agent on loopback
		}
		checkURL = "http://" + net.JoinHostPort(h, strconv.Itoa(p)) + "/healthz"
	}
	reg := &api.AgentServiceRegistration{
		ID: c.serviceID(), Name: ConsulService, Tags: tags, Meta: meta, Address: host, Port: port,
	}
	if checkURL != "" {
		chk := &api.AgentServiceCheck{
			CheckID:                        "relaymesh-" + s.Name + "-healthz",
			Name:                           "relayd admin /healthz",
			HTTP:                           checkURL,
			Method:                         http.MethodGet,
			Interval:                       orDefault(s.CheckInterval, 5*time.Second).String(),
			Timeout:                        orDefault(s.CheckTimeout, 2*time.Second).String(),
			DeregisterCriticalServiceAfter: orDefault(s.DeregisterOnFail, time.Minute).String(),
			// A relay that failed its check is used again only after
			// this many passing checks in a row, not one lucky answer.
			SuccessBeforePassing: ConsulChecksToPass,
		}
		// The relay registers once its admin API serves /healthz, so it
		// starts passing instead of critical until the agent's first check,
		// which Consul staggers by up to an interval.
		if !s.StartCritical {
			chk.Status = api.HealthPassing
		}
		reg.Check = chk
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := c.client.Agent().ServiceRegisterOpts(reg, api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(ctx)); err != nil {
		return fmt.Errorf("consul %s: registering %s: %w", c.addr, reg.ID, err)
	}
	return nil
}

// ConsulChecksToPass is how many passing checks in a row bring a relay
// whose check failed back to passing (Consul's success_before_passing).
const ConsulChecksToPass = 3

// ensureRegistered registers Self if the agent does not know it (an agent
// restarted in -dev mode, or one that deregistered it after a long critical
// spell), then writes its measurements and coordinate again: they may be
// gone too.
func (c *Consul) ensureRegistered(ctx context.Context) error {
	if c.opts.Self == nil {
		return nil
	}
	c.regMu.Lock()
	defer c.regMu.Unlock()
	c.mu.Lock()
	left := c.left
	c.mu.Unlock()
	if left {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, callTimeout)
	_, _, err := c.client.Agent().Service(c.serviceID(), (&api.QueryOptions{}).WithContext(qctx))
	cancel()
	var se api.StatusError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se) && se.Code == http.StatusNotFound:
	default:
		return fmt.Errorf("consul %s: looking up %s: %w", c.addr, c.serviceID(), err)
	}
	if err := c.Register(ctx); err != nil {
		return err
	}
	c.log.Info("registered with consul", zap.String("consul", c.addr), zap.String("service_id", c.serviceID()))
	return c.republish(ctx)
}

// Deregister removes Self's service, measurements and coordinate (relayd
// calls it on shutdown), for good: this registry will not register or write again,
// even if Run is still going. Its peers' measurements of it stay, and age.
func (c *Consul) Deregister(ctx context.Context) error {
	if c.opts.Self == nil {
		return nil
	}
	// Under regMu and writeMu: a registration or write in flight finishes
	// before the removal, not after it.
	c.regMu.Lock()
	defer c.regMu.Unlock()
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	c.left = true
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var errs []error
	if err := c.client.Agent().ServiceDeregisterOpts(c.serviceID(), (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		errs = append(errs, fmt.Errorf("deregistering %s: %w", c.serviceID(), err))
	}
	for _, prefix := range []string{ConsulKVPrefix, ConsulCoordinatesPrefix} {
		if _, err := c.client.KV().Delete(prefix+c.opts.Self.Name, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			errs = append(errs, fmt.Errorf("deleting %s%s: %w", prefix, c.opts.Self.Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("consul %s: %w", c.addr, err)
	}
	return nil
}

// Close deregisters Self (see Deregister) and logs the outcome: a relay
// left registered is used by its peers until its health check has failed
// and Consul deregisters it. A reader has nothing to release.
func (c *Consul) Close(ctx context.Context) error {
	if c.opts.Self == nil {
		return nil
	}
	if err := c.Deregister(ctx); err != nil {
		c.log.Warn("leaving consul registered; its health check will fail and Consul deregisters it after a minute", zap.Error(err))
		return err
	}
	c.log.Info("deregistered from consul")
	return nil
}

// splitListen splits a listen address; a wildcard or empty host is "".
func splitListen(addr string) (host string, port int) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0
	}
	port, _ = strconv.Atoi(p)
	if ip, err := netip.ParseAddr(h); err == nil && ip.IsUnspecified() {
		h = ""
	}
	return h, port
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
