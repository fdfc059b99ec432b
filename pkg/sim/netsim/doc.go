// Package netsim is a modelled internet for running relaymesh's real
// measurement and planning code at the scale of 100 to 10,000 relays: where
// relays and endpoints are, the true round-trip time (RTT) and loss rate
// between any two of them, noisy probe samples, and a churn schedule. It is
// a pure model: no I/O, no wall clock, and every random choice comes from
// the seed given to NewWorld or from the *rand.Rand a method is given, so a
// run is reproducible. A World is immutable and safe for concurrent use.
//
// # Using it
//
//	w, err := netsim.NewWorld(netsim.Config{Relays: 2000}, seed)
//	rnd := rand.New(rand.NewPCG(seed, 1))
//	client, dst := w.RandomEndpoint(rnd), w.RandomServer(rnd)
//	rtt := w.RTTMs(client, w.Relay(17))          // true RTT, ms
//	ms, lost := w.Sample(w.Relay(3), dst, rnd)   // one probe
//	for _, e := range w.Events(24 * time.Hour) { /* apply churn */ }
//
// Relays are Points 0..N−1 (World.Relay); clients and destinations are
// Points made by RandomEndpoint or EndpointIn (a home or office host) and
// RandomServer or ServerIn (a host in a data centre that is not a relay).
// Any two Points of a World have an RTT. Relay i depends only on the seed,
// i and the Config, so a world of N relays holds the first N relays of a
// bigger world with the same seed. World.Path explains one pair's RTT
// component by component.
//
// # Places
//
// The city table (cities.go) holds 200 real cities on every inhabited
// continent with their published coordinates, rounded to 0.01°, and a
// weight: a judgement, in tiers, of how many VPS and cloud providers offer
// a location there (10 for Frankfurt, Amsterdam, London, Ashburn, New York,
// Tokyo and Singapore; 0.1–1 for cities a few regional providers serve). It
// is not a count. North America, Europe and East Asia hold about 77% of the
// weight, as in real VPS offerings. Relays and endpoints are placed in a
// city drawn by weight (several per city: different providers and data
// centres), each uniformly within MetroRadiusKm (20 km) of the centre.
// Endpoints use the same weights, so clients are as concentrated as
// servers, which real users are not.
//
// Each relay has a hosting provider (AS) k of Providers (20), drawn with
// weight 1/(k+1) so that a few providers host most relays; endpoints have
// one of EndpointISPs (10) access ISPs per city. Access delays, one way:
// relays and servers lognormal with median 0.5 ms and σ 0.7, clamped to
// 0.2–5 ms (a data centre's path to its provider's backbone); endpoints
// median 5 ms, σ 0.5, clamped to 1–30 ms (DSL, cable, fibre and office
// lines). Both are chosen, not measured.
//
// # True RTT
//
//	RTT = propagation + bad-route penalty + 2·(access_a + access_b) + constant
//
// Propagation within a region is the great-circle distance d at the speed
// of light in fibre (FibreKmPerMs, 200 km/ms: refractive index about 1.5,
// physics) times a distance inflation
//
//	1.2 + 1.8 · 600 km / (600 km + d)
//
// (InflationLong, InflationShort, InflationScaleKm): about 2.3 at 400 km,
// 1.8 at 1,200 km, 1.45 at 4,000 km. Measurement studies find Internet
// routes well above the great circle, more so over short distances, where
// fixed detours to exchange points weigh most: the rule of thumb from
// campaigns in the United States is 2.1× line-of-sight distance, against
// about 1.3× for the shortest fibre conduits (Bozkurt et al., "Dissecting
// latency in the Internet's fiber infrastructure", 2018). The curve is
// chosen so that well-connected data centres land near the RTTs publicly
// quoted between cloud regions and VPS locations (Frankfurt–Amsterdam
// ≈ 7–10 ms, New York–Chicago ≈ 20 ms, New York–Los Angeles ≈ 65 ms).
//
// Propagation between regions does not follow the great circle (hubs.go):
// traffic leaves its region at a hub city, crosses backbone links between
// hubs and enters the other region at a hub, and the model takes the
// shortest such route. Europe–Japan goes Marseille–Suez–Singapore–Tokyo or
// London–New York–Los Angeles–Tokyo, never over Siberia or the Arctic;
// São Paulo–London goes through Miami. Legs inside a region and links
// between hubs of one region cost what the same-region formula gives; the
// 31 links between regions cost the typical RTT publicly quoted between
// data centres in their two cities (London–New York 70 ms, Los Angeles–
// Tokyo 105 ms, Marseille–Singapore 145 ms, …), chosen to that order of
// magnitude, not fitted. Regions are routing regions, not continents:
// Russia and Central Asia are Europe (they reach the world through Moscow
// and Frankfurt); mainland China, Hong Kong and Taiwan are Greater China.
//
// The propagation is then multiplied by three lognormal factors with median
// 1, all symmetric in the pair and computed from hashes (SplitMix64) of the
// seed and the pair, so nothing is stored per pair and RTTMs is O(1):
//
//   - CityPairSigma (0.05), per pair of cities: how directly the route
//     between two cities runs, shared by all their hosts;
//   - RouteSigma (0.03), per pair of (city, provider): the route two
//     providers' networks take between two cities;
//   - HostPairSigma (0.01), per pair of hosts: ECMP path, rack, host.
//
// A pair whose hosts share a provider routes over one backbone: its
// propagation is multiplied by SameProviderFactor (0.95) and its chance of a
// bad route divided by 4. The result is never below the great circle's.
// The constant is uniform in 0–PairConstMs (0.5 ms) per pair of hosts
// (processing). All these values are chosen.
//
// Bad routes: the route between two (city, provider) pairs is tromboned
// through a far exchange with probability BadRouteShare (4%) times the
// worse end's region weight (Africa 3; Latin America, the Middle East,
// South Asia and Greater China 2; Southeast Asia 1.5; others 1), adding
// 30–150 ms (uniform); the share of a default world's relay pairs that
// have one: docs/defaults.md#the-modelled-internet.
// The weights follow the finding of measurement studies that local
// traffic in regions with thin local peering often leaves the continent;
// the numbers are chosen.
//
// # Triangle-inequality violations
//
// Detours pay when some relay c gives RTT(a,c) + RTT(c,b) < RTT(a,b): a
// triangle-inequality violation (TIV). Without the random factors, bad
// routes and the same-provider discount the model is a metric (a test
// checks that no such detour exists), so every TIV comes from the modelled
// routing effects: on the Internet, measurement work attributes TIVs to
// routing policy rather than geography (Zheng et al., "Internet routing
// policies and round-trip times", PAM 2005).
//
// World.TIVStats measures them: the share of sampled relay pairs with a
// shorter detour through some relay, with one at least 10% and 20%
// shorter, the violating pairs' median gain, and the share of violating
// triangles (a, b, c). The share of pairs with any shorter detour grows
// with the number of relays, since each relay is one more candidate; the
// share of triangles does not. A default world's shares are of the order
// of those published for end hosts (Ledlie, Gardner and Seltzer, "Network
// coordinates in the wild", NSDI 2007, who cite Tang and Crovella too), at
// the low end for large gains because relays sit in data centres, better
// connected than DNS servers and home computers; both, side by side:
// docs/defaults.md#the-modelled-internet. Lumezanu et al. ("Triangle
// inequality variations in the Internet", IMC 2009) found that TIVs come
// and go over time; this model's change only with drift (below). The test
// (TestTIVShare, a 500-relay world, three seeds) holds the default world's
// numbers in the bands 0.6–0.9 (any), 0.15–0.4 (10%), 0.03–0.15 (20%),
// 0.02–0.12 (median gain) and 0.03–0.15 (triangles).
//
// Config.WithKingDetours is a world whose route spread (RouteSigma) is
// fitted towards the King data set's shares as that paper reports them,
// 85% (any) and 22% (at least 20% shorter); it reaches about 83% and 21%:
// bench/detourfit and docs/defaults.md#the-modelled-internet.
//
// # Typical RTTs
//
// TestCityRTTs logs the median true RTT between data-centre hosts of
// twenty well-known city pairs over 200 seeds, and holds each in a band
// around the RTT publicly quoted between cloud regions and VPS locations
// there; the medians and their spread, beside the quoted values:
// docs/defaults.md#the-modelled-internet.
//
// # Samples and loss
//
// LossRate is a path's packet loss rate in each direction:
//
//	(LossBase + LossPer100Ms · RTT/100 ms) · lognormal(σ LossSigma) + EndpointAccessLoss per endpoint end
//
// with defaults 0.01%, 0.25% per 100 ms, σ 0.5 (per pair of (city,
// provider)) and 0.1% per home or office end, capped at LossMax (5%): a
// median of about 0.04% between data centres under 1,000 km apart, 0.2%
// across the Atlantic and 0.5% over 10,000 km. Longer routes (and bad
// routes, which are longer) lose more. Chosen, not measured.
//
// A Sample is one probe, a TCP handshake: lost when the SYN or the SYN-ACK
// is (ProbeLossRate = 1 − (1 − LossRate)²), reported as (0, true);
// otherwise the true RTT plus a queueing delay, exponential with mean
// JitterFrac·RTT + JitterMinMs (3% + 0.1 ms). A sample is never below the
// true RTT, so the minimum of many samples estimates it, as relaymesh's
// probes assume.
//
// # Churn
//
// With JoinPerHour, LeavePerHour and FailPerHour set (all zero by default:
// no churn), each relay runs its own two-state process from its own random
// stream: alive, it leaves gracefully at LeavePerHour or fails without
// notice at FailPerHour; down, it joins at JoinPerHour. A share
// InitialDownShare of relays is down at time 0 and joins later. Events
// returns the schedule up to a time, sorted; Alive(i, t) replays relay i's
// own schedule (cost: its events before t). Times are simulated durations
// since the start.
//
// # Drift
//
// With DriftShare set (zero by default: RTTs are static), routes change
// over time: each route, a pair of (city, provider), redraws its state
// every DriftHours (1 h) from its own phase, and is on a worse route with
// probability DriftShare, its propagation longer by up to DriftMaxFrac
// (30 %, uniform). World.At(t) is the world at time t; a World answers
// for time 0 unless made by At. The numbers are chosen, not measured.
//
// # Limits
//
//   - RTTs drift only by whole routes taking a worse path and back (with
//     DriftShare): no diurnal load, no better routes appearing, no
//     congestion beyond the per-sample queueing delay; loss is
//     independent per packet, not bursty.
//   - The hub graph is coarse: 27 hubs and 31 links stand for the world's
//     submarine and long-haul systems; cities far from their region's hubs
//     (Novosibirsk, Anchorage) and pairs near region borders can be routed
//     the long way; routes inside a region are always direct (so Lagos–
//     Nairobi is not sent through Europe except as a bad route).
//   - Hub link RTTs, inflation curve, random-factor σs, bad-route and loss
//     parameters are chosen to match public orders of magnitude, not fitted
//     to a data set.
//   - Provider effects are a same-provider discount and per-provider-pair
//     routes; providers have no footprint (any provider in any city) and
//     no bandwidth or capacity model: the world knows RTT and loss only.
//   - Endpoints share the relays' city weights; access delay does not vary
//     by country.
//   - Churn is memoryless and independent per relay: no correlated outages
//     of a provider or a region.
package netsim
