# syntax=docker/dockerfile:1
#
# The partitionq command in an image, for the workers (partitionq work),
# the ticker (partitionq tick) and the setup of a database (partitionq
# setup, then sql/roles.sql with psql): deploy/kubernetes runs all three
# from it. Build it with `make image`, which passes the Makefile's build
# settings and Go version on, so that the binary here is built as
# `make build` builds it.
#
# The image has a shell (work --exec runs its command with sh -c), psql
# and sql/roles.sql of the same version (/usr/share/partitionq/roles.sql),
# and tini as process 1, which forwards SIGTERM to partitionq and reaps
# what the commands leave behind. It runs as an unprivileged user (10001).
# Handlers in other languages: build your own image FROM this one and add
# their runtime.

ARG GO_IMAGE=golang:1.26.8-bookworm
ARG BASE_IMAGE=alpine:3.22

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The Makefile's BUILD_ENV and BUILD_FLAGS (make image passes them): a
# static binary (no cgo), without the build machine's paths.
ARG BUILD_ENV="CGO_ENABLED=0"
ARG BUILD_FLAGS="-trimpath"
RUN env ${BUILD_ENV} go build ${BUILD_FLAGS} -o /out/partitionq ./cmd/partitionq

FROM ${BASE_IMAGE}
RUN apk add --no-cache tini postgresql-client \
 && adduser -D -H -u 10001 -s /sbin/nologin partitionq
COPY --from=build /out/partitionq /usr/local/bin/partitionq
COPY sql/roles.sql /usr/share/partitionq/roles.sql
USER 10001:10001
WORKDIR /tmp
# The metrics, /livez and /readyz of work --metrics-addr :9464.
EXPOSE 9464
ENTRYPOINT ["/sbin/tini", "--", "partitionq"]
CMD ["--help"]
