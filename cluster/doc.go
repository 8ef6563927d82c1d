// Package cluster makes several mqttd nodes one broker over NATS (issue
// 38, part 1). A Node is this broker's membership of the
// cluster: one nats.go connection (two with shared subscriptions), to
// an external NATS server or cluster (cluster.nats.url) or to a
// nats-server embedded in this process
// (cluster.nats.embedded, only in builds with -tags natsserver: the server
// makes the binary about 75% heavier, so the default build, the Pi's, has
// only the client).
//
// What it owns:
//
//   - The subject mapping: an MQTT topic is a NATS subject under
//     "mqttd.<cluster>.t.", one token per level, escaped so that the
//     mapping reverses (Subject, TopicOf); a filter is the subjects that
//     match every topic it matches (FilterSubjects: '+' is '*', "a/#" is
//     "a.>" and "a").
//   - Retained messages: a retained message goes on a subject under
//     "mqttd.<cluster>.r." that every node subscribes to from its Start,
//     for live delivery; the retained stream (JetStream) keeps the latest
//     of each topic, and every node reads it in order and hands each to
//     its keeper (retained.go), so each keeps them all, those set while
//     it was away included, and answers a subscription from its own
//     store.
//   - The replicated store (JetStream key-value buckets, bound in the
//     background from Start, StoreReady): one owner per client id,
//     claimed with compare-and-swap (Claim, Release, Adopt), and the
//     previous owner asked to hand the id over (Handover, ServeHandover;
//     owner.go); each node's beats, the dead nodes' wills published once
//     by whichever node takes each record first, and a node cut off from
//     the store told so (Watch, PutWill, TakeWill, SweepWills;
//     liveness.go).
//   - Interest: Want and Unwant count the node's subscriptions per filter
//     and hold one NATS subscription per subject while any is wanted, so a
//     message crosses the network only to the nodes that want it. All of
//     a node's subscriptions share one queue group of its own, so a
//     message matching several of them reaches the node once.
//   - Shared subscriptions: WantShared and UnwantShared count the node's
//     subscriptions per (share group, filter) pair and hold, on a second
//     connection opened at the first one (the main one does not echo),
//     a NATS queue subscription per subject, live and retained, in a
//     queue group every node names alike: NATS gives each message to one
//     node of those with members, whose deliver gets it tagged with the
//     group and filter (Message.Group), for that group only (share.go).
//   - The message format: QoS, retain, the publisher's client id (for No
//     Local) and the 5.0 properties travel in one NATS header, decoded
//     defensively (a malformed one is counted and dropped).
//   - Bounds: Publish queues at most OutQueueMessages or OutQueueBytes
//     for its sending goroutine and drops past them (PublishWaiting waits
//     for room, bounded, first); received messages wait for deliver up to
//     InQueueMessages; subjects longer than MaxSubjectLen are never sent.
//     Everything dropped is counted in Stats.
//   - Flow control (pause.go): a node whose received messages pass
//     PauseHigh publishes a pause on "mqttd.<cluster>.flow", renewed while
//     they stay above PauseLow, then a resume; every node's sending
//     goroutine holds its messages while any pause is in force, so its
//     outgoing queue fills and its publishers wait, instead of the
//     receiver dropping. A pause not renewed ends after PauseExpiry. The
//     broker's own backlog (its clients' queues) pauses the others too,
//     through the function given to SetBehind.
//   - The connection's life: reconnecting forever with a bounded backoff
//     (nats.go re-subscribes), each loss and recovery logged once.
//
// Delivery is core NATS's, with the flow control above: a receiver that
// falls behind slows the senders down rather than dropping, but nothing
// is acknowledged between nodes, so it stays at most once. What was on
// its way when a pause went out beyond InQueueMessages - PauseHigh, and
// whatever a sender drops past its wait, is lost (and counted); a node
// that dies loses what it had queued either way. A message published
// while the NATS connection is down waits in nats.go's reconnect buffer;
// one published while a NATS server dies can be lost: until the other
// servers have dropped their routes to it, they may choose the dead
// server's stale copy of a node's queue subscription over the one the
// node made on reconnecting. QoS 1 and 2 across nodes are only as good
// as that until sessions are replicated (issue 39).
//
// The node does no matching, ACL checks or limits of its own: the broker
// applies its local ones to what deliver receives, as to any publication.
package cluster
