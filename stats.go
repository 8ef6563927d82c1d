package mqttd

import (
	"sync/atomic"

	"mqttd/persistence"
)

// stats are the broker's counters and gauges. They are kept in atomics on
// the paths that change them and read by the Prometheus collector
// (metrics.go), Server.Stats and the $SYS topics (sys.go), so that no two
// views of the broker can disagree.
type stats struct {
	// The counters bumped for every message, each on a cache line of its
	// own: readers and writers on every core touch them.
	messagesReceived paddedCounter
	messagesSent     paddedCounter
	bytesReceived    paddedCounter
	bytesSent        paddedCounter

	// deadLetters and lettersSkipped count the letters set aside on
	// $DLQ/ and those skipped (deadletter.go), by reason.
	deadLetters, lettersSkipped [numLetterReasons]atomic.Uint64

	connections    atomic.Int64 // open network connections
	sessions       atomic.Int64 // client sessions, online or not
	sessionsOnline atomic.Int64 // sessions with a connection
	subscriptions  atomic.Int64
	// clusterIn counts the messages other nodes sent this one, and
	// clusterDropped those it could not route (a topic or QoS this node
	// refuses); the node counts the rest of the drops (Server.Cluster).
	clusterIn      atomic.Uint64
	clusterDropped atomic.Uint64
	// clusterRefused counts CONNECTs refused because this node could not
	// claim their client id in the cluster.
	clusterRefused atomic.Uint64
	// clusterAdopted counts sessions taken from the replicated store for
	// a client whose previous node was gone.
	clusterAdopted atomic.Uint64
	// qos2Resent counts the QoS 2 messages routed again under their stamp
	// (their publisher sent them again before the nodes confirmed them),
	// qos2Duplicates the copies a session did not take again, its stamp
	// remembered, and stampsEvicted the stamps forgotten before their
	// time, a session past session.MaxStamps (cluster_qos2.go).
	qos2Resent     atomic.Uint64
	qos2Duplicates atomic.Uint64
	stampsEvicted  atomic.Uint64
	retained       atomic.Int64
	retainedBytes  atomic.Int64 // Message.Size of the retained messages
	queued         atomic.Int64 // messages waiting in session queues
	willsDelayed   atomic.Int64 // wills waiting for their Will Delay Interval
	outboxBytes    atomic.Int64 // bytes waiting in every outbox
	incomingBytes  atomic.Int64 // bytes of packets arriving, not yet complete
	heapLive       atomic.Int64 // the live heap at the memory watch's last look
	memoryPressure atomic.Bool
	// topicsCounted is the topics in the busiest topics' table;
	// topicsReplaced counts those that took the place of the least
	// counted in a full table (topcount.go).
	topicsCounted  atomic.Int64
	topicsReplaced atomic.Uint64

	connects        atomic.Uint64
	connectsRefused atomic.Uint64
	publishDenied   atomic.Uint64
	subscribeDenied atomic.Uint64
	// authFailures counts refused logins; readDenied, messages not
	// delivered to a client the Authorizer did not let read their topic;
	// subsRevoked, subscriptions a reload's rules took away.
	authFailures   atomic.Uint64
	readDenied     atomic.Uint64
	subsRevoked    atomic.Uint64
	willsPublished atomic.Uint64
	// willsRefused counts wills not published: the user was revoked, or
	// the rules no longer grant the topic; clientsRevoked, connections
	// a reload's password files ended.
	willsRefused   atomic.Uint64
	clientsRevoked atomic.Uint64
	// loginsLimited counts logins refused unchecked for an empty bucket;
	// loginSources, the sources with a bucket; loginEvicted, those
	// forgotten before their bucket refilled (auth_limit.go).
	loginsLimited   atomic.Uint64
	loginSources    atomic.Int64
	loginEvicted    atomic.Uint64
	retainedRefused atomic.Uint64 // retained messages the store had no room for
	// subscriptions that matched more retained messages than were sent
	retainedTruncated atomic.Uint64
	retainedLimited   atomic.Uint64 // likewise, the client's allowance used up (retain.go)
	sessionsExpired   atomic.Uint64
	sessionsRefused   atomic.Uint64 // new sessions refused by limits.max_sessions
	userPropsRefused  atomic.Uint64 // messages refused by limits.max_user_properties
	// subscriptions refused by limits.max_subscriptions_per_client
	subscriptionsRefused atomic.Uint64
	panics               atomic.Uint64 // connection handlers that panicked
	memoryPressureEvents atomic.Uint64 // times the live heap went past 7/8 of limits.max_memory
	sharedHandedOff      atomic.Uint64 // shared-subscription messages handed to another member
	storeCommits         atomic.Uint64 // transactions the store applied, failed ones included
	storeOps             atomic.Uint64 // operations in them
	storeCommitNanos     atomic.Uint64 // time spent in them
	storeErrors          atomic.Uint64 // transactions that failed
	storeRefused         atomic.Uint64 // acknowledgements refused, or connections closed, for a failed commit
	storeBackpressure    atomic.Uint64 // reads that waited for a commit: too much waited for one
	readerWaits          atomic.Uint64 // wakeups that found every reader busy
	takeoverWaits        atomic.Uint64 // CONNECTs that waited for a closed predecessor (takeover.go)
	lingerSkipped        atomic.Uint64 // connections closed without lingering: maxLingering were (linger.go)
	// storeCommitSeconds and storeCommitOps are the commits by duration
	// and by operations: their sums are storeCommitNanos and storeOps.
	storeCommitSeconds, storeCommitOps histogram
	// committer counts what it never applied; nil without a store.
	committer   *persistence.Committer
	dropped     [numDropReasons]atomic.Uint64
	rejected    [numRejectReasons]atomic.Uint64
	disconnects [numCloseReasons]atomic.Uint64
}

// storeCancelled is the operations the committer never applied.
func (s *stats) storeCancelled() uint64 {
	if s.committer == nil {
		return 0
	}
	return s.committer.Stats().Cancelled
}

// paddedCounter keeps a hot counter off the cache lines of the others.
type paddedCounter struct {
	atomic.Uint64
	_ [56]byte
}

// dropReason says why a delivery was dropped.
type dropReason uint8

const (
	dropOutboxFull     dropReason = iota // QoS 0 for a client that reads too slowly
	dropQueueFull                        // the session queue held limits.max_queued
	dropOfflineQoS0                      // QoS 0 for an offline client (limits.queue_qos0 off)
	dropExpired                          // the message expired before delivery
	dropTooLarge                         // larger than the 5.0 client's Maximum Packet Size
	dropOutboxTotal                      // QoS 0 while every outbox together held limits.max_outbox_bytes_total
	dropMemoryPressure                   // QoS 0 for a client with a backlog under memory pressure
	dropNoMember                         // a shared-subscription message handed on found no member left
	dropDeliveryLimit                    // sent dead_letters.max_deliveries times unacknowledged
	numDropReasons
)

var dropReasonNames = [numDropReasons]string{
	dropOutboxFull:     "outbox_full",
	dropQueueFull:      "queue_full",
	dropOfflineQoS0:    "offline_qos0",
	dropExpired:        "expired",
	dropTooLarge:       "too_large",
	dropOutboxTotal:    "outbox_total",
	dropMemoryPressure: "memory_pressure",
	dropNoMember:       "no_member",
	dropDeliveryLimit:  "delivery_limit",
}

func (r dropReason) String() string { return dropReasonNames[r] }

// Stats is a snapshot of the broker's counters (totals since New) and
// gauges (values now).
type Stats struct {
	Connections    int64 // open network connections
	Sessions       int64 // client sessions kept, online or not
	SessionsOnline int64 // sessions with a connection
	Subscriptions  int64 // subscriptions held by sessions
	// SubscriptionBytes is what they cost, as
	// limits.max_subscription_bytes_total counts it.
	SubscriptionBytes int64
	Retained          int64 // retained messages
	RetainedBytes     int64 // their topic, payload and properties bytes
	Queued            int64 // messages waiting in session queues
	// Inflight is the QoS 1/2 messages sent to clients (or to be sent
	// again when they come back) and not completely acknowledged.
	Inflight int64
	// QueuedBytes is the topic, payload and properties bytes of the
	// queued messages, each counted once however many queues hold it,
	// and what each queue's entry for it costs (session.EntryCost and its
	// subscription identifiers).
	QueuedBytes int64
	// OutboxBytes is the bytes waiting to be written to connections.
	OutboxBytes int64
	// IncomingBytes is the bytes of packets that have started to arrive
	// and are not complete yet.
	IncomingBytes int64
	// HeapLive is the live heap at the memory watch's last look (every
	// second while serving).
	HeapLive int64
	// MemoryPressure is set while the live heap is past 7/8 of
	// limits.max_memory (until it is below 3/4 again).
	MemoryPressure bool
	// MemoryPressureEvents counts the times memory pressure began.
	MemoryPressureEvents uint64
	// SharedHandedOff counts the messages a member of a share group had
	// not acknowledged when it left, handed to another member.
	SharedHandedOff  uint64
	MessagesReceived uint64
	MessagesSent     uint64
	BytesReceived    uint64
	BytesSent        uint64
	Connects         uint64 // CONNECTs accepted
	ConnectsRefused  uint64 // CONNECTs refused with a CONNACK error code
	PublishDenied    uint64 // PUBLISHes refused: by the Authorizer, or to $SYS
	SubscribeDenied  uint64 // subscriptions the Authorizer refused
	AuthFailures     uint64 // logins refused: bad password, unknown user, anonymous where not allowed
	ReadDenied       uint64 // deliveries the Authorizer refused (auth.Read)
	// SubscriptionsRevoked counts subscriptions taken away because
	// reloaded rules no longer grant them.
	SubscriptionsRevoked uint64
	WillsPublished       uint64
	// WillsRefused counts wills not published because, asked again at
	// publication, the password file no longer had the user or the
	// Authorizer no longer granted the topic.
	WillsRefused uint64
	// ClientsRevoked counts connections ended by a reload that took the
	// user out of the password file.
	ClientsRevoked uint64
	// LoginsRateLimited counts logins refused without a check because
	// their source had auth.login_burst refused logins in a row.
	LoginsRateLimited uint64
	// WillsDelayed is the wills waiting for their Will Delay Interval.
	WillsDelayed    int64
	RetainedRefused uint64 // retained messages the store had no room for
	// RetainedTruncated counts subscriptions whose retained messages
	// were not all sent: one SUBSCRIBE is sent at most what the session
	// can hold (limits.max_inflight + limits.max_queued messages,
	// limits.max_queued_bytes bytes).
	RetainedTruncated     uint64
	RetainedSendsLimited  uint64 // likewise, the client was sent a session's worth within limits.retained_send_refill
	SessionsExpired       uint64 // sessions dropped after their expiry interval offline
	SessionsRefused       uint64 // new sessions refused by limits.max_sessions
	UserPropertiesRefused uint64 // messages refused by limits.max_user_properties
	// SubscriptionsRefused counts subscriptions refused by a limit:
	// limits.max_filter_length, max_subscriptions_per_client,
	// max_subscription_bytes_per_client, max_subscription_bytes_total,
	// max_overlapping_subscriptions, or memory pressure.
	SubscriptionsRefused uint64
	// StoreCommits counts the transactions the store applied (failed
	// ones included), StoreOps the operations in them, StoreErrors those
	// that failed and StoreRefused the acknowledgements refused (or
	// connections closed) because what they covered was not stored.
	StoreCommits, StoreOps, StoreErrors, StoreRefused uint64
	// StoreBackpressure counts the reads that waited for a commit before
	// reading more: too many operations waited for one.
	StoreBackpressure uint64
	// ReaderWaits counts the connections with bytes to read that waited
	// for a reader because every one of the bounded reader goroutines was
	// busy (a burst of readable connections, or readers stalled on slow
	// subscribers).
	ReaderWaits uint64
	// Dropped counts deliveries dropped, by reason: outbox_full,
	// queue_full, offline_qos0, expired, too_large, outbox_total,
	// memory_pressure, no_member, delivery_limit.
	Dropped map[string]uint64
	// DeadLetters counts the letters set aside on $DLQ/, by reason
	// (expired, queue_full, too_large, delivery_limit, no_subscribers);
	// DeadLettersSkipped those not set aside (over dead_letters.rate or
	// max_bytes).
	DeadLetters, DeadLettersSkipped map[string]uint64
	// Disconnects counts closed connections by CloseReason.String.
	Disconnects map[string]uint64
	// Rejected counts connections closed at accept, by the limit that
	// refused them: max_connections, max_connections_per_address,
	// memory_pressure; and those a listener closed before MQTT:
	// listener_max_connections, handshakes_pending, handshakes_pending_per_address,
	// websocket_origin, handshake_failed.
	Rejected map[string]uint64
}

// Stats returns a snapshot of the broker's counters and gauges.
func (s *Server) Stats() Stats {
	st := &s.stats
	out := Stats{
		Connections:           st.connections.Load(),
		Sessions:              st.sessions.Load(),
		SessionsOnline:        st.sessionsOnline.Load(),
		Subscriptions:         st.subscriptions.Load(),
		SubscriptionBytes:     s.sessLim.SubscriptionBytes(),
		Retained:              st.retained.Load(),
		RetainedBytes:         st.retainedBytes.Load(),
		Queued:                st.queued.Load(),
		Inflight:              s.sessLim.Inflight(),
		QueuedBytes:           s.queueBudget.Bytes(),
		OutboxBytes:           st.outboxBytes.Load(),
		IncomingBytes:         st.incomingBytes.Load(),
		HeapLive:              st.heapLive.Load(),
		MemoryPressure:        st.memoryPressure.Load(),
		MemoryPressureEvents:  st.memoryPressureEvents.Load(),
		SharedHandedOff:       st.sharedHandedOff.Load(),
		MessagesReceived:      st.messagesReceived.Load(),
		MessagesSent:          st.messagesSent.Load(),
		BytesReceived:         st.bytesReceived.Load(),
		BytesSent:             st.bytesSent.Load(),
		Connects:              st.connects.Load(),
		ConnectsRefused:       st.connectsRefused.Load(),
		PublishDenied:         st.publishDenied.Load(),
		SubscribeDenied:       st.subscribeDenied.Load(),
		AuthFailures:          st.authFailures.Load(),
		ReadDenied:            st.readDenied.Load(),
		SubscriptionsRevoked:  st.subsRevoked.Load(),
		WillsPublished:        st.willsPublished.Load(),
		WillsRefused:          st.willsRefused.Load(),
		ClientsRevoked:        st.clientsRevoked.Load(),
		LoginsRateLimited:     st.loginsLimited.Load(),
		WillsDelayed:          st.willsDelayed.Load(),
		RetainedRefused:       st.retainedRefused.Load(),
		RetainedTruncated:     st.retainedTruncated.Load(),
		RetainedSendsLimited:  st.retainedLimited.Load(),
		SessionsExpired:       st.sessionsExpired.Load(),
		SessionsRefused:       st.sessionsRefused.Load(),
		UserPropertiesRefused: st.userPropsRefused.Load(),
		SubscriptionsRefused:  st.subscriptionsRefused.Load(),
		StoreCommits:          st.storeCommits.Load(),
		StoreOps:              st.storeOps.Load(),
		StoreErrors:           st.storeErrors.Load(),
		StoreRefused:          st.storeRefused.Load(),
		StoreBackpressure:     st.storeBackpressure.Load(),
		ReaderWaits:           st.readerWaits.Load(),
		Dropped:               make(map[string]uint64, numDropReasons),
		DeadLetters:           make(map[string]uint64, numLetterReasons),
		DeadLettersSkipped:    make(map[string]uint64, numLetterReasons),
		Disconnects:           make(map[string]uint64, numCloseReasons),
		Rejected:              make(map[string]uint64, numRejectReasons),
	}
	for r := range numRejectReasons {
		out.Rejected[r.String()] = st.rejected[r].Load()
	}
	for r := range numDropReasons {
		out.Dropped[r.String()] = st.dropped[r].Load()
	}
	for r := range numLetterReasons {
		out.DeadLetters[r.String()] = st.deadLetters[r].Load()
		out.DeadLettersSkipped[r.String()] = st.lettersSkipped[r].Load()
	}
	for r := range numCloseReasons {
		out.Disconnects[r.String()] = st.disconnects[r].Load()
	}
	return out
}
