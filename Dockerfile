# The ratelimit-sidecar image: a static Go binary on distroless, nothing else in it.
#   docker build -t ratelimit-sidecar:dev .

FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so a source change does not download modules again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO_ENABLED=0: distroless/static has no libc. -trimpath keeps build paths out of the binary.
# -tags vtprotobuf compiles go-control-plane's generated encoders, which the gRPC codec uses.
RUN CGO_ENABLED=0 go build -tags vtprotobuf -trimpath -ldflags="-s -w" -o /out/ratelimit-sidecar ./cmd/ratelimit-sidecar
# Envoy Gateway and Istio run envoyproxy/ratelimit's image with command: ["/bin/ratelimit"]; a symlink lets
# this image take its place. distroless has no shell to make it, so it is made here and copied as a directory,
# which keeps it a symlink.
RUN mkdir -p /out/bin && ln -s /ratelimit-sidecar /out/bin/ratelimit

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ratelimit-sidecar /ratelimit-sidecar
COPY --from=build /out/bin/ /bin/
# UID 65532. Kubernetes cannot check runAsNonRoot against a user name, so deploy/k8s sets runAsUser: 65532.
USER nonroot
# gRPC (ratelimit.v3 and grpc.health.v1) and HTTP (/healthcheck, /json, /rlconfig, /healthz, /readyz, /rules,
# /metrics): envoyproxy/ratelimit's ports.
EXPOSE 8081 8080
# No HEALTHCHECK: Kubernetes ignores it and probes gRPC health directly; compose does not need one.
ENTRYPOINT ["/ratelimit-sidecar"]
