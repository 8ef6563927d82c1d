# mqttd in a container: built from this checkout, run as a non-root user
# on a distroless base (no shell, no package manager, nothing but the
# binary, its config and CA certificates).
#
#   docker build -t mqttd \
#     --build-arg VERSION="$(git describe --tags --always --dirty)" \
#     --build-arg COMMIT="$(git rev-parse HEAD)" .
#   docker run -p 1883:1883 -p 8083:8083 -v mqttd-data:/var/lib/mqttd mqttd
#
# The config is packaging/docker/mqttd.yaml; mount another over
# /etc/mqttd/mqttd.yaml to change it.

FROM golang:1.26 AS build
WORKDIR /src
# The modules first, so that a change to the source does not fetch them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Stamped as hack/release does; left empty, `mqttd version` says "dev".
ARG VERSION=
ARG COMMIT=
RUN CGO_ENABLED=0 go build -trimpath -tags nethttpomithttp2 \
        -ldflags "-s -w -X main.releaseVersion=${VERSION} -X main.releaseCommit=${COMMIT}" \
        -o /out/mqttd ./cmd/mqttd \
    && hack/notices >/out/copyright \
    && mkdir /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/mqttd /usr/bin/mqttd
COPY --from=build /out/copyright /usr/share/doc/mqttd/copyright
COPY packaging/docker/mqttd.yaml /etc/mqttd/mqttd.yaml
# The state directory belongs to the user the image runs as (nonroot,
# 65532), so that a new volume mounted there is writable.
COPY --from=build --chown=65532:65532 /out/data /var/lib/mqttd
USER 65532:65532
VOLUME /var/lib/mqttd
# MQTT, and MQTT over WebSocket (ws://host:8083/mqtt).
EXPOSE 1883 8083
ENTRYPOINT ["/usr/bin/mqttd"]
CMD ["--config", "/etc/mqttd/mqttd.yaml"]
