package mqttd

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the broker's Prometheus collectors. They are registered on
// Options.Registerer, never on the global registry.
type metrics struct {
	connections      prometheus.Gauge
	connects         prometheus.Counter
	connectsRefused  prometheus.Counter
	messagesReceived prometheus.Counter
	messagesSent     prometheus.Counter
	bytesSent        prometheus.Counter
	dropped          *prometheus.CounterVec
	droppedOutbox    prometheus.Counter
	droppedQueue     prometheus.Counter
	droppedOffline   prometheus.Counter
	droppedExpired   prometheus.Counter
	malformed        prometheus.Counter
	protocolErrors   prometheus.Counter
	publishDenied    prometheus.Counter
	subscribeDenied  prometheus.Counter
	willsPublished   prometheus.Counter
	panics           prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "mqttd", Name: name, Help: help})
	}
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "mqttd", Name: "connections",
			Help: "Open network connections."}),
		connects:         counter("connects_total", "CONNECTs accepted."),
		connectsRefused:  counter("connects_refused_total", "CONNECTs refused with a CONNACK error code."),
		messagesReceived: counter("messages_received_total", "PUBLISH packets routed (wills included)."),
		messagesSent:     counter("messages_sent_total", "PUBLISH packets queued for clients."),
		bytesSent:        counter("bytes_sent_total", "Bytes written to clients."),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "mqttd", Name: "messages_dropped_total",
			Help: "Deliveries dropped, by reason."}, []string{"reason"}),
		malformed:       counter("malformed_packets_total", "Connections closed for a malformed or oversized packet."),
		protocolErrors:  counter("protocol_errors_total", "Connections closed for a protocol error."),
		publishDenied:   counter("publish_denied_total", "PUBLISHes the Authorizer refused."),
		subscribeDenied: counter("subscribe_denied_total", "Subscriptions the Authorizer refused."),
		willsPublished:  counter("wills_published_total", "Will messages published."),
		panics:          counter("connection_panics_total", "Connection handlers that panicked (a bug)."),
	}
	// Resolved once: a label lookup per dropped message would cost a hash.
	m.droppedOutbox = m.dropped.WithLabelValues("outbox_full")
	m.droppedQueue = m.dropped.WithLabelValues("queue_full")
	m.droppedOffline = m.dropped.WithLabelValues("offline_qos0")
	m.droppedExpired = m.dropped.WithLabelValues("expired")
	if reg == nil {
		return m, nil
	}
	var errs []error
	for _, c := range []prometheus.Collector{m.connections, m.connects, m.connectsRefused, m.messagesReceived,
		m.messagesSent, m.bytesSent, m.dropped, m.malformed, m.protocolErrors, m.publishDenied,
		m.subscribeDenied, m.willsPublished, m.panics} {
		errs = append(errs, reg.Register(c))
	}
	return m, errors.Join(errs...)
}
