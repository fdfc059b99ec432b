package main

import (
	"context"
	"sync"
	"time"

	"github.com/relaymesh/relaymesh/pkg/registry"
	"github.com/relaymesh/relaymesh/pkg/udpask"
)

// udpCheckInFlight bounds the asks of a check in flight at once, as a
// plan's round bounds its requests.
const udpCheckInFlight = 64

// checkUDPAsks asks each relay with an admin address for its windows in
// one UDP datagram to its admin port's number, as a plan asks (relayd
// admin_udp), each waited for up to wait. It returns the round trip of
// each acknowledgement, ms, for the relays whose acknowledgement and
// reply both came; a relay missing from it did not answer in time.
func checkUDPAsks(ctx context.Context, key udpask.Key, relays []registry.Relay, wait time.Duration) (map[string]float64, error) {
	cl, err := udpask.NewClient(key)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var mu sync.Mutex
	answered := map[string]float64{}
	slots := make(chan struct{}, udpCheckInFlight)
	var wg sync.WaitGroup
	for _, r := range relays {
		if r.Admin == "" {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			actx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			// No targets: the relay answers with its windows alone.
			p, err := cl.Ask(actx, r.Name, r.Admin, 1, wait, nil, true)
			if err != nil {
				return
			}
			if _, _, _, err := p.Wait(actx); err != nil {
				return
			}
			mu.Lock()
			answered[r.Name] = float64(p.AckRTT().Microseconds()) / 1000
			mu.Unlock()
		})
	}
	wg.Wait()
	return answered, nil
}
