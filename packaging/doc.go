// Package packaging holds what the mqttd .deb is made of (the systemd unit
// mqttd.service, the maintainer scripts in deb/, nfpm.yaml) and the Docker
// image's config, and tests what hack/release makes: the .deb packages
// unpacked with dpkg-deb, the unit checked with systemd-analyze, and every
// binary running a QoS 2 round trip, the ARM ones under qemu-user.
//
// It is a module of its own so that nfpm, pinned here as a tool (go tool
// nfpm), and its dependencies stay out of the broker's go.mod, and so that
// `go test ./...` at the root does not build a release twice (hack/test
// -full runs this module's tests once, in a step of their own).
package packaging
