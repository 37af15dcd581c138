# joiner: static binary on distroless, non-root.
#   docker build --build-arg JOINER_REVISION=$(git rev-parse HEAD) -t joiner:$(cat VERSION) .
# The build stage runs scripts/build, the same `go build` CI runs.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# .git is not in the context: give the commit for `joiner version`,
#   docker build --build-arg JOINER_REVISION=$(git rev-parse HEAD) -t joiner:$(cat VERSION) .
ARG JOINER_REVISION
RUN scripts/build /out/joiner \
 && mkdir -p /out/state

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/joiner /joiner
# The state dir exists and belongs to the runtime user, so a fresh named
# volume mounted there (docker-compose.yml) is writable.
COPY --from=build --chown=65532:65532 /out/state /var/lib/joiner
USER 65532:65532
ENV JOINER_STATE_DIR=/var/lib/joiner \
    JOINER_HTTP_ADDR=:8080
EXPOSE 8080
VOLUME ["/var/lib/joiner"]
ENTRYPOINT ["/joiner"]
CMD ["run"]
