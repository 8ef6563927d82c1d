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
//   - The route table (routes.go, routetrie.go): Want and Unwant count
//     the node's subscriptions per filter, and the first and the last
//     are announced to the others on "mqttd.<cluster>.routes", numbered
//     within the node's generation; a summary every second lets a node
//     that missed one, or meets a node new or restarted, ask for the
//     whole table (request and reply on "mqttd.<cluster>.snap.<node>").
//     A node silent for NodeTimeout, found dead, or saying goodbye at
//     Close has its routes dropped. Each node holds the others' filters
//     in a trie, bounded per node (past the bound the node is taken to
//     want every topic).
//   - Batches (send.go, batch.go): Publish matches a topic in the trie
//     once, encodes the message once as a record (topic, QoS, retain,
//     the publisher's client id for No Local, the 5.0 properties,
//     payload) and queues it with its destinations; the one sending
//     goroutine appends it to a buffer per destination node and
//     publishes a buffer as one NATS message on that node's subject
//     ("mqttd.<cluster>.to.<node>") when it reaches batchMax or the queue
//     is empty: no timer, and each topic's order kept. The receiving
//     node checks a batch's framing as it comes and decodes it, a
//     malformed one counted and dropped whole, on its delivery
//     goroutine.
//   - The subject mapping, for what goes on subjects of its own: an MQTT
//     topic is a NATS subject under "mqttd.<cluster>.t.", one token per
//     level, escaped so that the mapping reverses (Subject, TopicOf); a
//     filter is the subjects that match every topic it matches
//     (FilterSubjects: '+' is '*', "a/#" is "a.>" and "a").
//   - Retained messages: a retained message goes live in the batches to
//     the nodes that want its topic; the retained stream (JetStream)
//     keeps the latest of each topic, under "mqttd.<cluster>.k.", and
//     every node reads it in order and hands each to its keeper
//     (retained.go), so each keeps them all, those set while it was away
//     included, and answers a subscription from its own store.
//   - The replicated store (JetStream key-value buckets, bound in the
//     background from Start, StoreReady): one owner per client id,
//     claimed with compare-and-swap (Claim, Release, Adopt), and the
//     previous owner asked to hand the id over (Handover, ServeHandover;
//     owner.go); each node's beats, the dead nodes' wills published once
//     by whichever node takes each record first, and a node cut off from
//     the store told so (Watch, PutWill, TakeWill, SweepWills;
//     liveness.go).
//   - Shared subscriptions: WantShared and UnwantShared count the node's
//     subscriptions per (share group, filter) pair, announce the filter
//     as shared in the route table, and hold, on a second connection
//     opened at the first one (the main one does not echo), a NATS queue
//     subscription per subject, live and retained, in a queue group every
//     node names alike. A message that a node's share group wants is also
//     published on its own subject ("mqttd.<cluster>.t." or ".r."), its
//     QoS, retain, origin and properties in one NATS header: NATS gives it
//     to one node of those with members, whose deliver gets it tagged with
//     the group and filter (Message.Group), for that group only
//     (share.go).
//   - Bounds: Publish queues at most OutQueueMessages or OutQueueBytes
//     for its sending goroutine and drops past them (PublishWaiting waits
//     for room, bounded, first); received batches wait for deliver up to
//     InQueueBytes, the share groups' messages up to InQueueMessages;
//     subjects longer than MaxSubjectLen are never sent. Everything
//     dropped is counted in Stats.
//   - Flow control (pause.go): a node whose received messages pass a
//     high mark (BatchPauseHigh messages or BatchPauseBytes of batches,
//     PauseHigh of the share groups') publishes a pause on
//     "mqttd.<cluster>.flow", renewed until they are below the low marks,
//     then a resume; every node's sending
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
// its way when a pause went out beyond the room past the high marks, and
// whatever a sender drops past its wait, is lost (and counted); a node
// that dies loses what it had queued either way. A message published
// while the NATS connection is down waits in nats.go's reconnect buffer;
// one published while a NATS server dies can be lost: until the other
// servers have dropped their routes to it, they may choose the dead
// server's stale copy of a node's queue subscription over the one the
// node made on reconnecting. A subscription made on one node gets the
// other nodes' messages once its announcement has reached them, a few
// milliseconds after its SUBACK. QoS 1 and 2 across nodes are only as good
// as that until sessions are replicated (issue 39).
//
// The node does no matching, ACL checks or limits of its own: the broker
// applies its local ones to what deliver receives, as to any publication.
package cluster
