# syntax=docker/dockerfile:1
# Herald in a container: a static binary (no cgo) on Debian slim, run as a
# non-root user, the state dir a volume. Build and run:
#   docker build --build-arg VERSION=$(git describe --tags --always) -t herald .
#   docker run -p 8790:8790 -v herald-state:/var/lib/herald \
#     -v $PWD/herald.json5:/etc/herald/herald.json5:ro --env-file herald.env herald
# In the container the config must listen on 0.0.0.0:8790, which needs
# channels.web.token and gateway.admin.token (see docs/operations.md). Debian slim rather than a
# distroless image because the exec tool needs a shell and the usual tools.
# bubblewrap is installed for the exec sandbox; Docker's default seccomp
# profile refuses the user namespaces it needs, so there the sandbox is
# Landlock (Linux 6.12+ host kernel) unless the container may create user
# namespaces. `docker run … herald doctor` says which (docs/security.md).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# goolm: the pure-Go Olm for Matrix end-to-end encryption (no libolm).
RUN CGO_ENABLED=0 go build -tags goolm -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/herald ./cmd/herald

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates bubblewrap \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/herald --shell /usr/sbin/nologin herald \
 && install -d -o herald -g herald -m 0700 /var/lib/herald \
 && install -d -m 0755 /etc/herald
COPY --from=build /out/herald /usr/local/bin/herald
ENV HERALD_STATE_DIR=/var/lib/herald HERALD_CONFIG=/etc/herald/herald.json5
VOLUME /var/lib/herald
EXPOSE 8790
USER herald:herald
ENTRYPOINT ["/usr/local/bin/herald"]
CMD ["gateway"]
