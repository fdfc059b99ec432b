# relaymesh — `make demo` runs the main job, `make test` runs every test.
GO ?= go
# Honour go.mod's toolchain line (go1.27.3, fetched from the Go module proxy
# once) even where the installed Go says GOTOOLCHAIN=local: Go 1.26.8's
# standard library has known vulnerabilities that relayd reaches (crypto/tls,
# crypto/x509, net/http; `make vulncheck` lists them under 1.26.8). A newer
# installed Go is used as it is.
export GOTOOLCHAIN := auto
# Fuzz budget per target. A count, not a duration, in CI: see scripts/fuzz.sh
# for the Go 1.26 fuzz-deadline race this avoids. `make fuzz-long`: 5 min each.
FUZZTIME ?= 200000x
# package:FuzzTarget, every parser we own
FUZZ_TARGETS = ./pkg/socks5:FuzzReadGreeting ./pkg/socks5:FuzzReadRequest ./pkg/socks5:FuzzReadUserPass \
	./pkg/socks5:FuzzReadReply ./pkg/httpconnect:FuzzThrough ./relay:FuzzParseConfig ./pkg/lab/topology:FuzzParse \
	./pkg/route:FuzzReadRequest ./pkg/route:FuzzReadResponse ./planner:FuzzParseMatrix \
	./pkg/fleet:FuzzParse ./relay:FuzzHTTPFrontend ./pkg/route:FuzzReadFrame ./pkg/socks5:FuzzParseUDPDatagram \
	./pkg/rules:FuzzParse

.PHONY: reliability-full chaos image image-consul all build test test-deps vet vulncheck unit fuzz fuzz-long demo bench-relay bench-split bench-ttfb bench-lab-engine consul-outage-full clean bench-planner bench-sim bench-sizes bench-lossy bench-learnt bench-consul-costs bench-rules bench-stripe bench-stripe-lossy bench-detour-fit

all: build

# Stamp the commit into the binaries (--version, relaymesh_build_info)
# where git answers for the tree; elsewhere (no git, a tree git refuses to
# read) they build unstamped and say "dev". Overrides a GOFLAGS of
# -buildvcs=false.
BUILDVCS = $(shell git status --porcelain >/dev/null 2>&1 && echo auto || echo false)

build:
	mkdir -p bin
	$(GO) build -buildvcs=$(BUILDVCS) -o bin/ ./cmd/...

test: test-deps vet vulncheck unit fuzz

test-deps:
	./scripts/test-deps.sh

# staticcheck, pinned, from the Go module proxy (cached after the first run).
STATICCHECK = honnef.co/go/tools/cmd/staticcheck@v0.8.2

# govulncheck, pinned, against a pinned snapshot of the Go vulnerability
# database (scripts/vulncheck.sh: from the module proxy, no other server).
GOVULNCHECK = golang.org/x/vuln/cmd/govulncheck@v1.9.0
VULNDB = v0.0.0-20261105234957-e22db6528018

vulncheck:
	GO=$(GO) ./scripts/vulncheck.sh $(GOVULNCHECK) $(VULNDB)

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# Everything under the race detector, relayd binaries in e2e included, except
# the link emulator and the lab (their timing self-checks need the packet
# loop uninstrumented and the machine to themselves) and the Docker fleet
# (a 10 s failover bound): those run after the rest, one package at a time,
# counting the lab runs measured again (scripts/lab-tests.sh).
# A test needing what this machine lacks (root for namespaces and TUN,
# /dev/net/tun, a tool, Docker, bin/consul, IPv6) skips with a printed
# reason, and under CI=true fails instead (pkg/testenv). Both phases keep
# their `go test -json` in bin/ (unit-tests.json, lab-tests.json) and print
# what go test prints without -v (tools/testlog); then, passed or failed,
# every skipped test with its reason and the lab retries per test.
unit: bin/consul bin/testlog
	@rm -f bin/unit-tests.json bin/lab-tests.json bin/lab-tests.log
	RELAYMESH_E2E_RACE=1 bin/testlog run bin/unit-tests.json $(GO) test -race -json -count=1 -timeout 15m $$($(GO) list ./... | grep -v -e /pkg/lab/wanemu -e /e2e/lab -e /e2e/docker) \
	  && ./scripts/lab-tests.sh ./pkg/lab/wanemu/... ./e2e/lab/... ./e2e/docker/...; \
	  code=$$?; bin/testlog summary bin/unit-tests.json bin/lab-tests.json || code=1; exit $$code

bin/testlog: tools/testlog/main.go
	mkdir -p bin
	$(GO) build -o bin/testlog ./tools/testlog

# A real Consul agent for the Consul registry tests (pkg/registry, e2e): built
# once from tools/consul (its own module: Consul's dependencies stay out of
# ours), ~4 min cold, then cached here (git-ignored). Tests skip without it
# (fail under CI=true).
bin/consul: tools/consul/go.mod tools/consul/go.sum tools/consul/main.go
	mkdir -p bin
	CGO_ENABLED=0 $(GO) build -C tools/consul -trimpath -o ../../bin/consul .

# The Consul outage at the registry issue's full length: Consul stopped for
# 30 s while relays keep carrying traffic, then restarted; the matrix must be
# current again within 10 s. (make test runs it with a 5 s outage.)
consul-outage-full: bin/consul
	RELAYMESH_CONSUL_OUTAGE=30s $(GO) test -count=1 -timeout 5m -run TestConsulFleet -v ./e2e/

# The reliability cases at their full settings (docs/reliability.md): churn
# of 10,000 connections (one relay, and through 3 native hops), 1 GiB each
# way through 4 hops, the 30 s Consul outage, a vanished relay with the
# default keepalive (bound 150 s), the full chaos run. Needs root for the
# lab; ~15 min.
reliability-full: bin/consul
	RELAYMESH_FULL=1 $(GO) test -count=1 -timeout 30m -v -run 'TestChurnNoLeak|TestNativeChurnNoLeak|TestIntegrityBothDirections' ./e2e/
	RELAYMESH_FULL=1 $(GO) test -count=1 -timeout 15m -v -run TestLabVanishedRelay ./e2e/lab/
	$(MAKE) consul-outage-full chaos

# The lab chaos run at full setting: 200 downloads at a time for 60 s through
# 4 relays while one is killed and restarted every 5 s (make test runs 50
# for 20 s). Needs root.
chaos:
	RELAYMESH_CHAOS=full $(GO) test -count=1 -timeout 10m -run TestLabChaos -v ./e2e/lab/

fuzz:
	./scripts/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

fuzz-long:
	$(MAKE) fuzz FUZZTIME=5m

demo:
	./scripts/demo.sh

# The rule engine: load and lookup of 10,000 rules (no root; under a minute):
# bench/results/rules.md.
bench-rules:
	./bench/run-rules-bench.sh

# Many tunnels through one proxy: relayd vs glider under a 20,000-descriptor
# limit, 3,000 busy and 9,000 opened (root; ~5 min): bench/results/load.md.
bench-load:
	./bench/run-load-bench.sh

# relayctl rtt on 100 relays in probe mode coordinates, 30 s to 3 min after
# start (no root; ~4 min): bench/results/coords-scale.md.
bench-coords-scale:
	./bench/run-coords-scale.sh

# Loopback throughput and CPU per GiB: relayd vs an io.Copy relay and peers.
bench-relay:
	./bench/run-relay-bench.sh -size 2GiB -runs 5

# The relaymesh image, FROM scratch with binaries built here: no pulls
# (Dockerfile, docs/deploy.md). `docker build --target release .` builds
# from source where golang can be pulled.
IMAGE ?= relaymesh:local
image:
	mkdir -p bin/docker
	CGO_ENABLED=0 $(GO) build -buildvcs=$(BUILDVCS) -trimpath -ldflags="-s -w" -o bin/docker/ ./cmd/relayd ./cmd/relayctl
	docker build --target local -t $(IMAGE) .

# A Consul image for the local fleet (configs/compose/fleet-local.yml), FROM
# scratch with the pinned bin/consul: no pulls either.
CONSUL_IMAGE ?= relaymesh-consul:local
image-consul: bin/consul
	rm -rf bin/consul-image && mkdir -p bin/consul-image/tmp
	cp bin/consul bin/consul-image/consul
	printf 'FROM scratch\nCOPY . /\nENTRYPOINT ["/consul"]\n' > bin/consul-image/Dockerfile
	docker build -t $(CONSUL_IMAGE) bin/consul-image

clean:
	rm -rf bin bench/.bin

# The split experiment in the lab (needs root; ~30 min): relayd vs dante vs squid.
bench-split:
	./bench/run-split-bench.sh -runs 3 -size 67108864

# Time to first byte through a 4-segment 50 ms chain, relayd native (warm and
# cold) vs nested SOCKS5, dante, glider, squid; native throughput (root; ~5 min).
bench-ttfb:
	./bench/run-ttfb-bench.sh -runs 50

# Completion time against the model per object size (10 KB to 64 MB), direct
# and through the plan, in every shipped lab topology (root; ~60 min).
bench-sizes:
	./bench/run-size-bench.sh 3

# Loss and congestion control: plans before and after the relays learnt a
# lossy link's loss, against each path's measured rate, with CUBIC and
# with BBR relays (root; ~8 min).
bench-lossy:
	./bench/run-lossy-bench.sh 3

# Striped segments: one download over a 200 ms, 400 Mbit/s crossing between
# two relays on stock buffers, over 1, 3 and 4 links, and what the plan
# predicted (bench/results/stripe.md). Needs root.
bench-stripe:
	./bench/run-stripe-bench.sh 3 600000000 1 3 4

# Striping under loss: 60 s downloads over a 100 ms, 100 Mbit/s crossing that
# loses 0.2 % of its packets, CUBIC relays, over 1, 4 and 8 links, and what
# the plan predicted once the relays had learnt the loss
# (bench/results/stripe-lossy.md). Needs root; ~14 min.
bench-stripe-lossy:
	STRIPE_TOPO=stripe-lossy ./bench/run-stripe-bench.sh 3 60s 1 4 8

# Capacity learnt from traffic: plans before and after a download through a
# relay whose links are narrower than anyone declared, with CUBIC and with
# BBR relays (root; ~4 min).
bench-learnt:
	./bench/run-learnt-bench.sh 3

# The lab's packet engines side by side (root; ~10 min): the load each holds
# valid through 4 emulated links, and CPU per emulated Gbit.
bench-lab-engine:
	./bench/run-lab-engine-bench.sh -rates 50,100,200,300,400,600,800,1000 -runs 2

# The simulator's experiments (bench/sim-experiments.txt; no root, no network;
# run alone): make bench-sim-NAME runs bench/run-sim.sh NAME, which writes
# bench/results/sim-NAME.json or the file its entry names (bench/run-sim.sh
# --list names them). bench-sim
# is the first three: the defaults at 100 to 5,000 relays, churn, and the
# shortlist's ablations (~20 min).
bench-sim:
	./bench/run-sim.sh defaults && ./bench/run-sim.sh churn && ./bench/run-sim.sh ablation

bench-sim-%:
	./bench/run-sim.sh $*

# What the Consul backend's reads cost on the wire at 10 to 5,000 relays,
# against the pinned Consul (~3 min, no root): bench/results/consul-costs.md.
bench-consul-costs:
	./bench/run-consul-costs.sh

# The modelled internet's bad routes and route spread fitted to the share of
# one-hop detours published for the King data set (~20 s; no root).
bench-detour-fit:
	$(GO) run ./bench/detourfit -commit $$(git rev-parse --short HEAD) > bench/results/detour-fit.md

# Planner search time per plan on random complete matrices of 1000 and 5000
# relays, MaxHops 4 (targets: 100 ms and 1 s; ~15 s, 2.5 GB of memory).
# bench/results/planner.md is written by hand from this output.
bench-planner:
	$(GO) test -run '^$$' -bench 'BenchmarkPlan' -benchtime 5x -count 3 ./planner/
