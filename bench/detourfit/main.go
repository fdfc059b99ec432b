// Command detourfit fits the modelled internet's routing effects to a
// published share of one-hop detours: for each point of a grid of
// BadRouteShare and RouteSigma it measures, on worlds of -relays relays
// (seeds 1 to -seeds, -pairs sampled pairs each), the share of relay pairs
// with a shorter detour through one other relay, and with one at least
// 10 % and 20 % shorter; and ranks the points by their distance to the
// targets (-share, -share20: by default the King data set's, as Ledlie,
// Gardner and Seltzer report them, "Network coordinates in the wild",
// NSDI 2007). It prints a Markdown table, the best point first.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/relaymesh/relaymesh/pkg/sim/netsim"
)

// point is one grid point and what its worlds measured, averaged over
// the seeds.
type point struct {
	badRouteShare, routeSigma float64
	share, share10, share20   float64
	dist                      float64
}

func main() {
	relays := flag.Int("relays", 500, "relays in each world")
	pairs := flag.Int("pairs", 500, "relay pairs sampled in each world")
	seeds := flag.Int("seeds", 3, "worlds a grid point is measured on (seeds 1..N)")
	bad := flag.String("bad-route-share", "0.04,0.07,0.1,0.12,0.13,0.14,0.16,0.2", "BadRouteShare values")
	sigma := flag.String("route-sigma", "0.03,0.06,0.07,0.08,0.1,0.15,0.2", "RouteSigma values")
	commit := flag.String("commit", "", "the commit measured, for the header (none: no header)")
	target := flag.Float64("share", 0.85, "target share of pairs with any shorter one-hop detour")
	target20 := flag.Float64("share20", 0.22, "target share of pairs with a detour at least 20 % shorter")
	flag.Parse()
	bads, err := floats(*bad)
	if err == nil {
		var sigmas []float64
		if sigmas, err = floats(*sigma); err == nil {
			if *commit != "" {
				fmt.Printf("# The modelled internet's detours, fitted to the King data set\n\n")
				fmt.Printf("Made by `make bench-detour-fit` (`go run ./bench/detourfit %s`) on %s at commit %s.\n",
					strings.Join(os.Args[1:], " "), time.Now().UTC().Format("2006-01-02"), *commit)
				fmt.Printf("Worlds of %d relays, seeds 1–%d, %d relay pairs sampled in each; each row averages the seeds. ", *relays, *seeds, *pairs)
				fmt.Printf("A detour is through one other relay (netsim's TIVStats). Targets: a shorter one-hop detour for %.0f %% of pairs, one at least "+
					"20 %% shorter for %.0f %%, as Ledlie, Gardner and Seltzer report for the King data set (\"Network coordinates in the wild\", NSDI 2007). "+
					"The best point first; netsim's defaults are BadRouteShare 0.04, RouteSigma 0.03.\n\n", 100**target, 100**target20)
			}
			err = run(*relays, *pairs, *seeds, bads, sigmas, *target, *target20)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "detourfit:", err)
		os.Exit(1)
	}
}

func run(relays, pairs, seeds int, bads, sigmas []float64, target, target20 float64) error {
	var pts []point
	for _, b := range bads {
		for _, s := range sigmas {
			p := point{badRouteShare: b, routeSigma: s}
			for seed := 1; seed <= seeds; seed++ {
				w, err := netsim.NewWorld(netsim.Config{Relays: relays, BadRouteShare: b, RouteSigma: s}, uint64(seed))
				if err != nil {
					return err
				}
				st := w.TIVStats(pairs, rand.New(rand.NewPCG(uint64(seed), 1)))
				p.share += st.Share / float64(seeds)
				p.share10 += st.Share10 / float64(seeds)
				p.share20 += st.Share20 / float64(seeds)
			}
			p.dist = math.Hypot(p.share-target, p.share20-target20)
			pts = append(pts, p)
		}
	}
	slices.SortFunc(pts, func(a, b point) int { return cmp.Compare(a.dist, b.dist) })
	fmt.Printf("| BadRouteShare | RouteSigma | any shorter detour | ≥ 10 %% shorter | ≥ 20 %% shorter | distance to (%.2f, %.2f) |\n", target, target20)
	fmt.Println("|---:|---:|---:|---:|---:|---:|")
	for _, p := range pts {
		fmt.Printf("| %g | %g | %.3f | %.3f | %.3f | %.3f |\n", p.badRouteShare, p.routeSigma, p.share, p.share10, p.share20, p.dist)
	}
	return nil
}

// floats parses a comma-separated list of numbers.
func floats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", f, err)
		}
		out = append(out, v)
	}
	return out, nil
}
