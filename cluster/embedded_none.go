//go:build !natsserver

package cluster

import (
	"errors"

	"github.com/rs/zerolog"
)

// startEmbedded fails: this build has no NATS server (it makes the
// binary about 75% heavier; see docs/perf-log.md, "the NATS spike").
func startEmbedded(Config, zerolog.Logger) (embedded, error) {
	return nil, errors.New("cluster.nats.embedded: this mqttd was built without the embedded NATS server " +
		"(build with -tags natsserver), or set cluster.nats.url to an external NATS server")
}
