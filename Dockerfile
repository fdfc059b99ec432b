# relaymesh: relayd (the default command) and relayctl in one minimal image.
#
# Two ways to build it (docs/deploy.md):
#
#   1. From source, on any machine that can pull golang (the users' way):
#        docker build --target release -t relaymesh:latest .
#   2. From binaries built on the host, FROM scratch, pulling nothing (a
#      machine without registry access; what `make image` does):
#        CGO_ENABLED=0 go build -trimpath -o bin/docker/ ./cmd/relayd ./cmd/relayctl
#        docker build --target local -t relaymesh:local .
#
# `local` comes first: the classic builder stops at the target and never
# reaches the golang stage below, so it builds with no network at all.
# Both runtimes are the same: static binaries, no shell, uid 65532.
#
# Long paths want large TCP buffers; they are per network namespace, so set
# them on the container (docs/deploy.md explains the values), and let the
# admin API take TCP Fast Open (a round trip less for planners):
#   docker run --sysctl net.ipv4.tcp_rmem="4096 131072 33554432" \
#              --sysctl net.ipv4.tcp_wmem="4096 65536 33554432" \
#              --sysctl net.ipv4.tcp_fastopen=3 ...

FROM scratch AS local
COPY bin/docker/relayd bin/docker/relayctl /
USER 65532:65532
EXPOSE 1080 8080 7000 9090 9090/udp
# Nothing but relayd itself can check it here: no shell, no curl.
HEALTHCHECK --interval=10s --timeout=4s --start-period=5s --retries=3 CMD ["/relayd", "health", "--admin", "127.0.0.1:9090"]
ENTRYPOINT ["/relayd"]
CMD ["run", "--config", "/etc/relaymesh/relayd.yaml"]

FROM golang:1.26 AS build
# go.mod names the toolchain (go1.27.3); the golang image says GOTOOLCHAIN=local.
ENV GOTOOLCHAIN=auto
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/relayd ./cmd/relayctl

FROM scratch AS release
COPY --from=build /out/relayd /out/relayctl /
USER 65532:65532
EXPOSE 1080 8080 7000 9090 9090/udp
HEALTHCHECK --interval=10s --timeout=4s --start-period=5s --retries=3 CMD ["/relayd", "health", "--admin", "127.0.0.1:9090"]
ENTRYPOINT ["/relayd"]
CMD ["run", "--config", "/etc/relaymesh/relayd.yaml"]
