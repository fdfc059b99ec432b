package shortlist

// describe asks Describe about relays that just became candidates.
func (r *planRun) describe(names []string) error {
	if r.in.Describe == nil || len(names) == 0 {
		return nil
	}
	nodes, err := r.in.Describe(r.ctx, names)
	if err != nil {
		return err
	}
	for _, name := range names {
		_, told := nodes[name]
		if told {
			delete(r.undescribed, name)
		} else {
			r.undescribed[name] = true
		}
	}
	for name, n := range nodes {
		if rl, ok := r.placed[name]; ok && n.Name == name {
			n.Relay = true
			rl.Node = n
			r.placed[name] = rl
		}
	}
	// The destination too, when it is known (a relay's host): the
	// rounds then measure the plan the final search will choose.
	if n, ok := nodes[r.dst]; ok && n.Name == r.dst {
		n.Relay = false
		r.in.Destination = n
	}
	return nil
}

// probeDescribing probes batch and describes names: those that make
// none of batch's probes and that this host does not probe at once
// (their admin reads cost no round trip of their own; the two touch
// disjoint state, probe the measurements and describe the nodes), the
// others after the round, when the Prober may have brought their
// descriptions (see Input.Describe).
func (r *planRun) probeDescribing(batch []Probe, names []string) error {
	makers := make(map[string]bool, len(batch))
	for _, b := range batch {
		makers[b.From] = true
		if b.From == r.client {
			makers[b.To] = true
		}
	}
	var during, after []string
	for _, name := range names {
		if makers[name] {
			after = append(after, name)
		} else {
			during = append(during, name)
		}
	}
	described := make(chan error, 1)
	go func() { described <- r.describe(during) }()
	err := r.probe(batch)
	if derr := <-described; err == nil {
		err = derr
	}
	if err == nil {
		err = r.describe(after)
	}
	return err
}
