package mqttd

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"

	"mqttd/listeners"
	"mqttd/session"
)

// collector exports the broker's stats to Prometheus. It reads the same
// atomics as Server.Stats when scraped, so the hot paths pay for an atomic
// add and nothing else. It is registered on Options.Registerer, never on
// the global registry.
type collector struct {
	st    *stats
	descs []*prometheus.Desc
	// gauges and counters read one value each; they line up with the
	// first descs.
	values                         []statValue
	dropped, disconnects, rejected *prometheus.Desc
	deadLetters, lettersSkipped    *prometheus.Desc
	// buildInfo is the constant mqttd_build_info metric.
	buildInfo prometheus.Metric
	// commitSeconds and commitOps are the store's histograms.
	commitSeconds, commitOps *prometheus.Desc
	// bridges reads the bridges' state (Server.Bridges), each exported
	// under its name.
	bridges                                         func() []BridgeState
	bridgeConnected, bridgeQueued, bridgeQueuedB    *prometheus.Desc
	bridgeInflight, bridgeForwarded, bridgeConnects *prometheus.Desc
	bridgeFailures, bridgeDropped                   *prometheus.Desc
	// cluster reads this node's state in its cluster (Server.Cluster).
	cluster                                                             func() (ClusterState, bool)
	clusterConnected, clusterMessages, clusterFilters                   *prometheus.Desc
	clusterBatches, clusterRoutes, clusterResyncs                       *prometheus.Desc
	clusterDropped, clusterReconnects                                   *prometheus.Desc
	clusterPauses, clusterHeld                                          *prometheus.Desc
	clusterWaits, clusterWaited                                         *prometheus.Desc
	clusterStoreReady, clusterTakeovers, clusterRefused, clusterAdopted *prometheus.Desc
	clusterNodes, clusterDeadNodes, clusterLateBeats                    *prometheus.Desc
	clusterStoreWrites, clusterQoS2                                     *prometheus.Desc
}

// statValue is one metric read from stats.
type statValue struct {
	kind prometheus.ValueType
	read func(*stats) float64
}

// newCollector exports st, the queues' bytes, the windows of the sessions
// made with sess, and the build o names.
func newCollector(st *stats, queue *session.QueueBudget, sess *session.Limits, o Options) *collector {
	c := &collector{st: st}
	add := func(name, help string, kind prometheus.ValueType, read func(*stats) float64) {
		c.descs = append(c.descs, prometheus.NewDesc("mqttd_"+name, help, nil, nil))
		c.values = append(c.values, statValue{kind, read})
	}
	gauge := func(name, help string, read func(*stats) int64) {
		add(name, help, prometheus.GaugeValue, func(s *stats) float64 { return float64(read(s)) })
	}
	counter := func(name, help string, read func(*stats) uint64) {
		add(name, help, prometheus.CounterValue, func(s *stats) float64 { return float64(read(s)) })
	}
	gauge("connections", "Open network connections.", func(s *stats) int64 { return s.connections.Load() })
	gauge("sessions", "Client sessions kept, online or not.", func(s *stats) int64 { return s.sessions.Load() })
	gauge("sessions_online", "Client sessions with a connection.", func(s *stats) int64 { return s.sessionsOnline.Load() })
	gauge("sessions_offline", "Persistent sessions kept while their client is away.", func(s *stats) int64 {
		online := s.sessionsOnline.Load() // first: a session counts in sessions before it goes online
		return max(s.sessions.Load()-online, 0)
	})
	gauge("subscriptions", "Subscriptions held by sessions.", func(s *stats) int64 { return s.subscriptions.Load() })
	gauge("subscription_bytes", "What the subscriptions held by sessions cost, as limits.max_subscription_bytes_total counts it.",
		func(*stats) int64 { return sess.SubscriptionBytes() })
	gauge("retained_messages", "Retained messages.", func(s *stats) int64 { return s.retained.Load() })
	gauge("retained_bytes", "Topic, payload and properties bytes of the retained messages.",
		func(s *stats) int64 { return s.retainedBytes.Load() })
	gauge("queued_messages", "Messages waiting in session queues.", func(s *stats) int64 { return s.queued.Load() })
	gauge("queued_bytes", "Topic, payload and properties bytes of the messages waiting in session queues, each counted once, "+
		"and what each queued entry costs besides (limits.max_queued_bytes_total counts them).",
		func(*stats) int64 { return queue.Bytes() })
	gauge("inflight_messages", "QoS 1/2 messages sent to clients (or to be sent again when they come back) and not completely acknowledged.",
		func(*stats) int64 { return sess.Inflight() })
	gauge("outbox_bytes", "Bytes waiting to be written to connections.", func(s *stats) int64 { return s.outboxBytes.Load() })
	gauge("incoming_bytes", "Bytes of packets that have started to arrive and are not complete yet.",
		func(s *stats) int64 { return s.incomingBytes.Load() })
	gauge("read_ahead_bytes", "Bytes of the buffers TLS and WebSocket connections read their sockets ahead into while input keeps coming (at most 4 MiB).",
		func(*stats) int64 { return listeners.ReadAheadBytes() })
	gauge("heap_live_bytes", "The live heap at the memory watch's last look.", func(s *stats) int64 { return s.heapLive.Load() })
	gauge("memory_pressure", "1 while the live heap is past 7/8 of limits.max_memory (until below 3/4).",
		func(s *stats) int64 {
			if s.memoryPressure.Load() {
				return 1
			}
			return 0
		})
	counter("memory_pressure_events_total", "Times memory pressure began.",
		func(s *stats) uint64 { return s.memoryPressureEvents.Load() })
	counter("shared_handed_off_total", "Messages a member of a share group left unacknowledged, handed to another member.",
		func(s *stats) uint64 { return s.sharedHandedOff.Load() })
	counter("messages_received_total", "PUBLISH packets routed (wills included).",
		func(s *stats) uint64 { return s.messagesReceived.Load() })
	gauge("topics_counted", "Topics in the busiest topics' table while someone looks at it (/api/v1/topics): at most 1,024; 0 while nobody does.",
		func(s *stats) int64 { return s.topicsCounted.Load() })
	counter("topics_replaced_total", "Topics that took the place of the least counted one in the busiest topics' full table.",
		func(s *stats) uint64 { return s.topicsReplaced.Load() })
	counter("messages_sent_total", "PUBLISH packets queued for clients.", func(s *stats) uint64 { return s.messagesSent.Load() })
	counter("bytes_received_total", "Bytes read from clients.", func(s *stats) uint64 { return s.bytesReceived.Load() })
	counter("bytes_sent_total", "Bytes written to clients.", func(s *stats) uint64 { return s.bytesSent.Load() })
	counter("connects_total", "CONNECTs accepted.", func(s *stats) uint64 { return s.connects.Load() })
	counter("connects_refused_total", "CONNECTs refused with a CONNACK error code.",
		func(s *stats) uint64 { return s.connectsRefused.Load() })
	counter("publish_denied_total", "PUBLISHes refused: by the Authorizer, or to $SYS.", func(s *stats) uint64 { return s.publishDenied.Load() })
	counter("subscribe_denied_total", "Subscriptions the Authorizer refused.",
		func(s *stats) uint64 { return s.subscribeDenied.Load() })
	counter("auth_failures_total", "Logins refused: a bad password, an unknown user, an anonymous client where none is allowed.",
		func(s *stats) uint64 { return s.authFailures.Load() })
	counter("deliveries_denied_total", "Messages not delivered to a client the Authorizer does not let read their topic.",
		func(s *stats) uint64 { return s.readDenied.Load() })
	counter("subscriptions_revoked_total", "Subscriptions taken away because reloaded auth rules no longer grant them.",
		func(s *stats) uint64 { return s.subsRevoked.Load() })
	gauge("wills_delayed", "Wills waiting for their Will Delay Interval.", func(s *stats) int64 { return s.willsDelayed.Load() })
	counter("wills_published_total", "Will messages published.", func(s *stats) uint64 { return s.willsPublished.Load() })
	gauge("login_sources", "Sources (IPv4 addresses, IPv6 /64s) whose login attempts are remembered: at most auth.login_addresses.",
		func(s *stats) int64 { return s.loginSources.Load() })
	counter("logins_rate_limited_total", "Logins refused unchecked: their source had auth.login_burst refused logins and must wait auth.login_interval for each next.",
		func(s *stats) uint64 { return s.loginsLimited.Load() })
	counter("login_sources_evicted_total", "Sources forgotten before their login bucket refilled, to keep at most auth.login_addresses.",
		func(s *stats) uint64 { return s.loginEvicted.Load() })
	counter("wills_refused_total", "Wills not published: asked again at publication, the user was no longer in the password file or the rules no longer granted the topic.",
		func(s *stats) uint64 { return s.willsRefused.Load() })
	counter("clients_revoked_total", "Connections ended by a reload that took their user out of the password file.",
		func(s *stats) uint64 { return s.clientsRevoked.Load() })
	counter("subscriptions_refused_total", "Subscriptions refused by a limit: limits.max_filter_length, max_subscriptions_per_client, "+
		"max_subscription_bytes_per_client, max_subscription_bytes_total, max_overlapping_subscriptions, or memory pressure.",
		func(s *stats) uint64 { return s.subscriptionsRefused.Load() })
	counter("user_properties_refused_total", "Messages refused: more user properties than limits.max_user_properties.",
		func(s *stats) uint64 { return s.userPropsRefused.Load() })
	counter("sessions_refused_total", "New sessions refused: the broker held limits.max_sessions.",
		func(s *stats) uint64 { return s.sessionsRefused.Load() })
	counter("sessions_expired_total", "Sessions dropped after their expiry interval offline.",
		func(s *stats) uint64 { return s.sessionsExpired.Load() })
	counter("retained_refused_total", "Retained messages not kept: the retained store was full.",
		func(s *stats) uint64 { return s.retainedRefused.Load() })
	counter("retained_sends_truncated_total", "Subscriptions whose retained messages were not all sent: "+
		"one SUBSCRIBE is sent at most limits.max_inflight + limits.max_queued messages and limits.max_queued_bytes bytes.", func(s *stats) uint64 { return s.retainedTruncated.Load() })
	counter("retained_sends_limited_total", "Subscriptions whose retained messages were not all sent: the client had been sent "+
		"a session's worth within limits.retained_send_refill.", func(s *stats) uint64 { return s.retainedLimited.Load() })
	counter("store_commits_total", "Transactions (each one fsync at durability sync) the store applied.",
		func(s *stats) uint64 { return s.storeCommits.Load() })
	counter("store_operations_total", "Operations (messages, session entries, deletes) in the store's transactions.",
		func(s *stats) uint64 { return s.storeOps.Load() })
	add("store_commit_seconds_total", "Time spent committing to the store.", prometheus.CounterValue,
		func(s *stats) float64 { return float64(s.storeCommitNanos.Load()) / 1e9 })
	counter("store_cancelled_total", "Store operations never applied: outbound entries put and deleted while both waited for one commit.",
		func(s *stats) uint64 { return s.storeCancelled() })
	counter("store_backpressure_total", "Reads that waited for a commit before reading more: more than 16,384 operations waited for one.",
		func(s *stats) uint64 { return s.storeBackpressure.Load() })
	counter("reader_waits_total", "Connections with bytes to read that waited for a reader: every one of the bounded reader goroutines was busy.",
		func(s *stats) uint64 { return s.readerWaits.Load() })
	counter("takeover_waits_total", "CONNECTs that waited, up to a second, for the connection they take over to end: its client had closed it, "+
		"and what it sent before (a DISCONNECT) is handled first.", func(s *stats) uint64 { return s.takeoverWaits.Load() })
	counter("linger_skipped_total", "Connections closed at once after the server's DISCONNECT, without reading what their client still sent: "+
		"64 connections were lingering already.", func(s *stats) uint64 { return s.lingerSkipped.Load() })
	counter("store_errors_total", "Store transactions that failed.", func(s *stats) uint64 { return s.storeErrors.Load() })
	counter("store_refused_total", "Acknowledgements refused (5.0) or connections closed (3.1.1) because what they covered could not be stored.",
		func(s *stats) uint64 { return s.storeRefused.Load() })
	counter("connection_panics_total", "Connection handlers that panicked (a bug).",
		func(s *stats) uint64 { return s.panics.Load() })
	c.commitSeconds = prometheus.NewDesc("mqttd_store_commit_duration_seconds",
		"Store transactions by the time they took (an fsync included at durability sync).", nil, nil)
	c.commitOps = prometheus.NewDesc("mqttd_store_commit_operations",
		"Store transactions by their operations: many clients' changes share one commit.", nil, nil)
	c.buildInfo = prometheus.MustNewConstMetric(prometheus.NewDesc("mqttd_build_info",
		"Always 1: the version and commit of this build of mqttd, and the Go version that built it.",
		nil, prometheus.Labels{"version": o.Version, "commit": o.Commit, "goversion": runtime.Version()}),
		prometheus.GaugeValue, 1)
	bridge := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("mqttd_bridge_"+name, help, append([]string{"bridge"}, labels...), nil)
	}
	c.bridgeConnected = bridge("connected", "1 while the bridge is connected to its remote broker.")
	c.bridgeQueued = bridge("queued_messages", "Messages waiting to go out to the remote broker.")
	c.bridgeQueuedB = bridge("queued_bytes", "Bytes of the messages waiting to go out, as the bridge's max_queued_bytes counts them.")
	c.bridgeInflight = bridge("inflight_messages", "Messages sent to the remote broker and not yet acknowledged.")
	c.bridgeForwarded = bridge("forwarded_total", "Messages forwarded: out (acknowledged by the remote) and in (routed here).", "direction")
	c.bridgeConnects = bridge("connects_total", "Connections made to the remote broker.")
	c.bridgeFailures = bridge("connect_failures_total", "Connection attempts that failed (dial, TLS, refused CONNECT).")
	c.bridgeDropped = bridge("dropped_total", "Messages the bridge dropped or refused, by reason.", "reason")
	c.clusterConnected = prometheus.NewDesc("mqttd_cluster_connected", "1 while this node is connected to its cluster's NATS.", nil, nil)
	c.clusterMessages = prometheus.NewDesc("mqttd_cluster_messages_total", "Messages sent to the other nodes (out) and received from them (in).", []string{"direction"}, nil)
	c.clusterFilters = prometheus.NewDesc("mqttd_cluster_filters", "Filters this node's clients subscribe to, each wanted from the other nodes once.", nil, nil)
	c.clusterBatches = prometheus.NewDesc("mqttd_cluster_batches_total", "Batches (one NATS message of many messages) sent to the other nodes (out) and received from them (in).", []string{"direction"}, nil)
	c.clusterRoutes = prometheus.NewDesc("mqttd_cluster_routes", "Filters of the other nodes held in this node's route table (a node past its bound is held as wanting every topic).", nil, nil)
	c.clusterResyncs = prometheus.NewDesc("mqttd_cluster_route_resyncs_total", "Whole route tables asked of other nodes: a lost announcement, a node new or restarted.", nil, nil)
	c.clusterDropped = prometheus.NewDesc("mqttd_cluster_dropped_total", "Messages not sent to the other nodes (out: the outgoing queue full, NATS refusing them) or received from them and not delivered here (in: the receiving queue full, unreadable).", []string{"direction"}, nil)
	c.clusterPauses = prometheus.NewDesc("mqttd_cluster_pauses_total", "Pauses this node asked of the other nodes, its delivery behind (sent), and got from them (received).", []string{"direction"}, nil)
	c.clusterHeld = prometheus.NewDesc("mqttd_cluster_held_seconds_total", "Time this node's sending to the other nodes was held by their pauses.", nil, nil)
	c.clusterWaits = prometheus.NewDesc("mqttd_cluster_publish_waits_total", "Client messages that waited for room in the queue to the other nodes.", nil, nil)
	c.clusterWaited = prometheus.NewDesc("mqttd_cluster_publish_wait_seconds_total", "Time client messages waited for room in the queue to the other nodes.", nil, nil)
	c.clusterReconnects = prometheus.NewDesc("mqttd_cluster_reconnects_total", "Reconnections to the cluster's NATS.", nil, nil)
	c.clusterStoreReady = prometheus.NewDesc("mqttd_cluster_store_ready", "1 while this node reaches the cluster's replicated store (JetStream) and so can accept clients.", nil, nil)
	c.clusterTakeovers = prometheus.NewDesc("mqttd_cluster_takeovers_total", "Client ids taken over from other nodes (in) and given up to them (out).", []string{"direction"}, nil)
	c.clusterNodes = prometheus.NewDesc("mqttd_cluster_nodes", "Nodes this node sees beating in the cluster, itself included.", nil, nil)
	c.clusterDeadNodes = prometheus.NewDesc("mqttd_cluster_dead_nodes_total", "Nodes this node found dead (and swept the wills of).", nil, nil)
	c.clusterLateBeats = prometheus.NewDesc("mqttd_cluster_late_beats_total", "Nodes whose beats were late in the store past node_timeout but that answered they were alive, so were not taken for dead.", nil, nil)
	c.clusterStoreWrites = prometheus.NewDesc("mqttd_cluster_store_writes_total", "Writes to the replicated sessions' store (cluster.sessions: replicated): the commits that wrote to it, the round trips they took (atomic batches, each confirmed by a quorum of the replicas), the records written.", []string{"kind"}, nil)
	c.clusterQoS2 = prometheus.NewDesc("mqttd_cluster_qos2_total", "Exactly once for QoS 2 between nodes (cluster.sessions: replicated): messages routed again under their stamp, their publisher having sent them again before the nodes confirmed them (resent); copies a session did not take again, remembering their stamp (duplicate); stamps a session forgot before their time, past its bound (stamp_evicted).", []string{"event"}, nil)
	c.clusterRefused = prometheus.NewDesc("mqttd_cluster_refused_total", "Clients refused because this node could not claim their client id in the cluster.", nil, nil)
	c.clusterAdopted = prometheus.NewDesc("mqttd_cluster_sessions_adopted_total", "Persistent sessions read from the replicated store for clients whose node was gone.", nil, nil)
	c.dropped = prometheus.NewDesc("mqttd_messages_dropped_total", "Deliveries dropped, by reason.", []string{"reason"}, nil)
	c.deadLetters = prometheus.NewDesc("mqttd_dead_letters_total", "Messages given up on and set aside on $DLQ/, by reason.", []string{"reason"}, nil)
	c.lettersSkipped = prometheus.NewDesc("mqttd_dead_letters_skipped_total", "Messages given up on and not set aside (over dead_letters.rate or max_bytes), by reason.", []string{"reason"}, nil)
	c.disconnects = prometheus.NewDesc("mqttd_disconnects_total", "Connections closed, by reason.", []string{"reason"}, nil)
	c.rejected = prometheus.NewDesc("mqttd_connections_rejected_total",
		"Connections closed at accept, by the limit that refused them, or by their listener before MQTT (listener_max_connections, handshakes_pending, handshakes_pending_per_address, websocket_origin, handshake_failed).", []string{"reason"}, nil)
	return c
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.dropped
	ch <- c.deadLetters
	ch <- c.lettersSkipped
	ch <- c.disconnects
	ch <- c.rejected
	ch <- c.commitSeconds
	ch <- c.commitOps
	ch <- c.buildInfo.Desc()
	for _, d := range []*prometheus.Desc{c.bridgeConnected, c.bridgeQueued, c.bridgeQueuedB, c.bridgeInflight,
		c.bridgeForwarded, c.bridgeConnects, c.bridgeFailures, c.bridgeDropped,
		c.clusterConnected, c.clusterMessages, c.clusterFilters, c.clusterDropped, c.clusterReconnects,
		c.clusterStoreReady, c.clusterTakeovers, c.clusterRefused, c.clusterAdopted, c.clusterNodes, c.clusterDeadNodes, c.clusterLateBeats, c.clusterStoreWrites,
		c.clusterQoS2, c.clusterPauses, c.clusterHeld, c.clusterWaits, c.clusterWaited,
		c.clusterBatches, c.clusterRoutes, c.clusterResyncs} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for i, d := range c.descs {
		ch <- prometheus.MustNewConstMetric(d, c.values[i].kind, c.values[i].read(c.st))
	}
	for r := range numDropReasons {
		ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(c.st.dropped[r].Load()), r.String())
	}
	for r := range numLetterReasons {
		ch <- prometheus.MustNewConstMetric(c.deadLetters, prometheus.CounterValue, float64(c.st.deadLetters[r].Load()), r.String())
		ch <- prometheus.MustNewConstMetric(c.lettersSkipped, prometheus.CounterValue, float64(c.st.lettersSkipped[r].Load()), r.String())
	}
	for r := range numCloseReasons {
		ch <- prometheus.MustNewConstMetric(c.disconnects, prometheus.CounterValue, float64(c.st.disconnects[r].Load()), r.String())
	}
	for r := range numRejectReasons {
		ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(c.st.rejected[r].Load()), r.String())
	}
	ch <- c.st.storeCommitSeconds.metric(c.commitSeconds, &storeCommitSecondsBounds, float64(c.st.storeCommitNanos.Load())/1e9)
	ch <- c.st.storeCommitOps.metric(c.commitOps, &storeCommitOpsBounds, float64(c.st.storeOps.Load()))
	ch <- c.buildInfo
	if c.bridges != nil {
		c.collectBridges(ch)
	}
	if c.cluster != nil {
		c.collectCluster(ch)
	}
}

// collectCluster exports this node's state in its cluster, when it is in
// one.
func (c *collector) collectCluster(ch chan<- prometheus.Metric) {
	st, ok := c.cluster()
	if !ok {
		return
	}
	connected := 0.0
	if st.Connected {
		connected = 1
	}
	ch <- prometheus.MustNewConstMetric(c.clusterConnected, prometheus.GaugeValue, connected)
	ch <- prometheus.MustNewConstMetric(c.clusterMessages, prometheus.CounterValue, float64(st.MessagesOut), "out")
	ch <- prometheus.MustNewConstMetric(c.clusterMessages, prometheus.CounterValue, float64(st.MessagesIn), "in")
	ch <- prometheus.MustNewConstMetric(c.clusterFilters, prometheus.GaugeValue, float64(st.Filters))
	ch <- prometheus.MustNewConstMetric(c.clusterBatches, prometheus.CounterValue, float64(st.BatchesOut), "out")
	ch <- prometheus.MustNewConstMetric(c.clusterBatches, prometheus.CounterValue, float64(st.BatchesIn), "in")
	ch <- prometheus.MustNewConstMetric(c.clusterRoutes, prometheus.GaugeValue, float64(st.Routes))
	ch <- prometheus.MustNewConstMetric(c.clusterResyncs, prometheus.CounterValue, float64(st.RouteResyncs))
	ch <- prometheus.MustNewConstMetric(c.clusterDropped, prometheus.CounterValue, float64(st.DroppedIn), "in")
	ch <- prometheus.MustNewConstMetric(c.clusterDropped, prometheus.CounterValue, float64(st.DroppedOut), "out")
	ch <- prometheus.MustNewConstMetric(c.clusterPauses, prometheus.CounterValue, float64(st.PausesSent), "sent")
	ch <- prometheus.MustNewConstMetric(c.clusterPauses, prometheus.CounterValue, float64(st.PausesReceived), "received")
	ch <- prometheus.MustNewConstMetric(c.clusterHeld, prometheus.CounterValue, st.Held)
	ch <- prometheus.MustNewConstMetric(c.clusterWaits, prometheus.CounterValue, float64(st.PublishWaits))
	ch <- prometheus.MustNewConstMetric(c.clusterWaited, prometheus.CounterValue, st.PublishWaited)
	ch <- prometheus.MustNewConstMetric(c.clusterReconnects, prometheus.CounterValue, float64(st.Reconnects))
	ready := 0.0
	if st.StoreReady {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(c.clusterStoreReady, prometheus.GaugeValue, ready)
	ch <- prometheus.MustNewConstMetric(c.clusterTakeovers, prometheus.CounterValue, float64(st.TakeoversIn), "in")
	ch <- prometheus.MustNewConstMetric(c.clusterTakeovers, prometheus.CounterValue, float64(st.TakeoversOut), "out")
	ch <- prometheus.MustNewConstMetric(c.clusterRefused, prometheus.CounterValue, float64(st.Refused))
	ch <- prometheus.MustNewConstMetric(c.clusterAdopted, prometheus.CounterValue, float64(st.Adopted))
	ch <- prometheus.MustNewConstMetric(c.clusterNodes, prometheus.GaugeValue, float64(st.Nodes))
	ch <- prometheus.MustNewConstMetric(c.clusterDeadNodes, prometheus.CounterValue, float64(st.DeadNodes))
	ch <- prometheus.MustNewConstMetric(c.clusterLateBeats, prometheus.CounterValue, float64(st.LateBeats))
	ch <- prometheus.MustNewConstMetric(c.clusterStoreWrites, prometheus.CounterValue, float64(st.StoreCommits), "commits")
	ch <- prometheus.MustNewConstMetric(c.clusterStoreWrites, prometheus.CounterValue, float64(st.StoreRoundTrips), "round_trips")
	ch <- prometheus.MustNewConstMetric(c.clusterStoreWrites, prometheus.CounterValue, float64(st.StoreRecords), "records")
	ch <- prometheus.MustNewConstMetric(c.clusterQoS2, prometheus.CounterValue, float64(st.QoS2Resent), "resent")
	ch <- prometheus.MustNewConstMetric(c.clusterQoS2, prometheus.CounterValue, float64(st.QoS2Duplicates), "duplicate")
	ch <- prometheus.MustNewConstMetric(c.clusterQoS2, prometheus.CounterValue, float64(st.StampsEvicted), "stamp_evicted")
}

// collectBridges exports each bridge's state under its name.
func (c *collector) collectBridges(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, b := range c.bridges() {
		connected := 0.0
		if b.Connected {
			connected = 1
		}
		gauge(c.bridgeConnected, connected, b.Name)
		gauge(c.bridgeQueued, float64(b.Queued), b.Name)
		gauge(c.bridgeQueuedB, float64(b.QueuedBytes), b.Name)
		gauge(c.bridgeInflight, float64(b.Inflight), b.Name)
		counter(c.bridgeForwarded, b.ForwardedOut, b.Name, "out")
		counter(c.bridgeForwarded, b.ForwardedIn, b.Name, "in")
		counter(c.bridgeConnects, b.Connects, b.Name)
		counter(c.bridgeFailures, b.Failures, b.Name)
		for reason, n := range b.Dropped {
			counter(c.bridgeDropped, n, b.Name, reason)
		}
	}
}
