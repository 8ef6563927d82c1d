package main

import (
	"errors"
	"net"
	"syscall"

	"github.com/rs/zerolog"

	"mqttd/listeners"
)

// defaultMetricsAddress is the metrics address when none is configured:
// loopback, so that mqttd ctl finds the API of a broker started with no
// configuration, and nobody else reaches it.
const defaultMetricsAddress = "127.0.0.1:9183"

// listenMetrics listens on address ("": none). When address is def and
// another process has it (a second broker on the machine), it logs a
// warning and returns no listener and no error: a broker nobody
// configured an address for serves MQTT without its API rather than not
// at all. Any other address that cannot be bound is an error.
func listenMetrics(address, def string, log zerolog.Logger) (net.Listener, error) {
	if address == "" {
		return nil, nil
	}
	l, err := net.Listen(listeners.Network(address), address)
	if err != nil && address == def && errors.Is(err, syscall.EADDRINUSE) {
		log.Warn().Err(err).Str("address", address).Msg("the default metrics address is taken: serving without metrics " +
			"and the management API; set metrics.address (--metrics, MQTTD_METRICS) to a free address, or to off")
		return nil, nil
	}
	return l, err
}
