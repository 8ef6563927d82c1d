package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// One owner per client id in the whole cluster: the owners bucket, a
// JetStream key-value bucket replicated over the NATS servers, maps each
// client id a node serves (connected, or a persistent session it keeps)
// to that node's name. A node claims an id with compare-and-swap on the
// key's revision before it accepts a CONNECT, so two nodes can never both
// own one id: the second of two concurrent claims sees the first's
// revision and claims again, over it. It then asks the previous owner,
// over NATS request/reply, to hand the id over: that node closes its
// client's connection (5.0: Session taken over) and gives up the session,
// sending it along unless the new connection starts clean.

// ErrNoStore is returned while the node has no replicated store to claim
// client ids in: JetStream not reachable yet, or no quorum of its servers
// (the minority side of a netsplit).
var ErrNoStore = errors.New("cluster: the replicated store (JetStream) is not reachable")

// errContended is a claim that lost the compare-and-swap every time.
var errContended = errors.New("cluster: client id claimed concurrently by other nodes; try again")

// Timing of the replicated store.
const (
	// storeTimeout bounds one JetStream operation.
	storeTimeout = 3 * time.Second
	// bindRetry is the pause between two attempts to bind the buckets.
	bindRetry = time.Second
	// markerTTL is how long the bucket keeps the marker of a released
	// id: long enough for a concurrent claim to see the release, short
	// enough that ids used once do not pile up.
	markerTTL = time.Minute
	// claimAttempts bounds the compare-and-swap rounds of one claim.
	claimAttempts = 4
	// handoverTimeout bounds the wait for the previous owner's answer
	// (each part of it): a node that does not answer within it is taken
	// to be gone, with its session.
	handoverTimeout = 2 * time.Second
	// handoverChunk is the most bytes of a session sent in one NATS
	// message (a server's default max_payload is 1 MiB).
	handoverChunk = 512 << 10
	// MaxHandover is the most bytes of a session a node receives.
	MaxHandover = 256 << 20
)

// DefaultReplicas is the replicas of the node's buckets when
// Config.Replicas is 0, where the NATS servers run as a JetStream cluster;
// a single server gets 1.
const DefaultReplicas = 3

// kvStore is the node's view of the replicated store, once bound.
type kvStore struct {
	js                   jetstream.JetStream
	owners, nodes, wills jetstream.KeyValue
}

// ownership is the ids this node owns, with the revision of its claim:
// a release takes the key out only if no other node claimed it since.
type ownership struct {
	mu  sync.Mutex
	ids map[string]uint64
}

func ownersBucket(cluster string) string { return "mqttd_" + cluster + "_owners" }

// ownerKey is a client id's key in the owners bucket: keys allow only
// [-/_=.a-zA-Z0-9], so the id is base64url-encoded, or hashed when long.
func ownerKey(id string) string {
	if len(id) <= 180 {
		return "c" + base64.RawURLEncoding.EncodeToString([]byte(id))
	}
	sum := sha256.Sum256([]byte(id))
	return "h" + hex.EncodeToString(sum[:])
}

// bindStore binds (or creates) the node's buckets, retrying until it
// succeeds or the node closes: a node starts before a quorum of the
// JetStream cluster is up, and serves nobody until it has the store.
func (n *Node) bindStore(replicas int) {
	defer close(n.storeDone)
	js, err := jetstream.New(n.nc)
	if err != nil {
		n.log.Error().Err(err).Msg("cluster: JetStream client")
		return
	}
	var lastErr string
	for {
		st, err := n.openStore(js, replicas)
		if err == nil {
			n.store.Store(st)
			n.log.Info().Msg("cluster: replicated store ready")
			return
		}
		if n.closed.Load() {
			return
		}
		if msg := err.Error(); msg != lastErr || n.warn.allow() {
			lastErr = msg
			n.log.Warn().Err(err).Msg("cluster: replicated store not ready; client connections are refused until it is")
		}
		select {
		case <-n.stopIn:
			return
		case <-time.After(bindRetry):
		}
	}
}

func (n *Node) openStore(js jetstream.JetStream, replicas int) (*kvStore, error) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	owners, err := n.bucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:         ownersBucket(n.cluster),
		Description:    "mqttd: the node owning each client id",
		History:        1,
		LimitMarkerTTL: markerTTL,
	}, replicas)
	if err != nil {
		return nil, err
	}
	nodes, err := n.bucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      nodesBucket(n.cluster),
		Description: "mqttd: each node's beats",
		History:     1,
	}, replicas)
	if err != nil {
		return nil, err
	}
	wills, err := n.bucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:         willsBucket(n.cluster),
		Description:    "mqttd: the wills of each node's connected clients",
		History:        1,
		LimitMarkerTTL: markerTTL,
	}, replicas)
	if err != nil {
		return nil, err
	}
	if err := n.openRetained(ctx, js, replicas); err != nil {
		return nil, err
	}
	// The node's first beat comes before any of its wills: the others
	// know of every node whose wills they may have to publish.
	if _, err := nodes.Put(ctx, nodeKey(n.name), []byte(n.name)); err != nil {
		return nil, err
	}
	return &kvStore{js: js, owners: owners, nodes: nodes, wills: wills}, nil
}

// bucket binds bucket cfg.Bucket, or creates it with replicas (0:
// DefaultReplicas, or 1 where JetStream is not clustered), with reads
// answered by its leader only (leaderReads).
func (n *Node) bucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, replicas int) (jetstream.KeyValue, error) {
	_, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, err
	}
	if err != nil {
		err = withReplicas("bucket "+cfg.Bucket, replicas, func(r int) error {
			cfg.Replicas = r
			_, err := js.CreateKeyValue(ctx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) {
				return nil
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	if err := leaderReads(ctx, js, cfg.Bucket); err != nil {
		return nil, err
	}
	return js.KeyValue(ctx, cfg.Bucket)
}

// leaderReads turns off direct gets on bucket's stream, which the
// jetstream client turns on: a direct get may be answered by any
// replica, a lagging one too (this node's own server, just back from a
// netsplit), and an owner or will read from it would decide on a stale
// record. Reads then go to the stream's leader, which also decides the
// compare-and-swap writes.
func leaderReads(ctx context.Context, js jetstream.JetStream, bucket string) error {
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return err
	}
	cfg := stream.CachedInfo().Config
	if !cfg.AllowDirect {
		return nil
	}
	cfg.AllowDirect = false
	_, err = js.UpdateStream(ctx, cfg)
	return err
}

// StoreReady reports whether the node has its replicated store bound.
func (n *Node) StoreReady() bool { return n.store.Load() != nil }

// Claim makes this node the owner of client id and returns the node that
// owned it before ("" for none, or this node's own name). It returns
// ErrNoStore while the replicated store is not reachable: the broker then
// refuses the client, which tries another node.
func (n *Node) Claim(id string) (prev string, err error) {
	st := n.store.Load()
	if st == nil {
		return "", ErrNoStore
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	key, me := ownerKey(id), []byte(n.name)
	for range claimAttempts {
		e, err := st.owners.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			rev, err := st.owners.Create(ctx, key, me)
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			if err != nil {
				return "", storeErr(err)
			}
			n.owned.set(id, rev)
			return "", nil
		}
		if err != nil {
			return "", storeErr(err)
		}
		rev, err := st.owners.Update(ctx, key, me, e.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return "", storeErr(err)
		}
		n.owned.set(id, rev)
		return string(e.Value()), nil
	}
	return "", errContended
}

// storeErr is err with ErrNoStore when JetStream did not answer.
func storeErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("%w: %w", ErrNoStore, err)
	}
	return err
}

// Release gives up client id, whose session ended on this node: its key
// goes, unless another node claimed it since. It does not wait: the
// node's releaser purges the record, and a release it cannot take (more
// than releaseQueue waiting, or the store unreachable) leaves a record
// naming this node, which the next claim of the id replaces.
func (n *Node) Release(id string) {
	rev, ok := n.owned.take(id)
	if !ok {
		return
	}
	select {
	case n.releases <- release{id: id, rev: rev}:
	default:
	}
}

// releaseQueue bounds the releases waiting for the releaser.
const releaseQueue = 4096

type release struct {
	id   string
	rev  uint64
	will bool // a will record (DropWill), not an owner's
}

// releaser purges released ids' records one at a time until Close.
func (n *Node) releaser() {
	defer close(n.releaserDone)
	for {
		select {
		case <-n.stopIn:
			return
		case r := <-n.releases:
			n.purge(r)
		}
	}
}

func (n *Node) purge(r release) {
	st := n.store.Load()
	if st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	kv, key := st.owners, ownerKey(r.id)
	if r.will {
		kv, key = st.wills, willKey(n.name, r.id)
	}
	err := kv.Purge(ctx, key, jetstream.LastRevision(r.rev), jetstream.PurgeTTL(markerTTL))
	if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !isWrongLastSeq(err) && n.warn.allow() {
		n.log.Warn().Err(err).Str("client_id", r.id).Msg("cluster: releasing a client id")
	}
}

// Adopt claims client id for a session this node kept (restored from its
// store, or kept through a loss of the cluster) if no node owns it, and
// returns its owner: this node's name, or the node that took it
// meanwhile, to which the session now belongs.
func (n *Node) Adopt(id string) (owner string, err error) {
	st := n.store.Load()
	if st == nil {
		return "", ErrNoStore
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	key := ownerKey(id)
	for range claimAttempts {
		rev, err := st.owners.Create(ctx, key, []byte(n.name))
		if err == nil {
			n.owned.set(id, rev)
			return n.name, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return "", storeErr(err)
		}
		e, err := st.owners.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // released meanwhile
		}
		if err != nil {
			return "", storeErr(err)
		}
		if owner := string(e.Value()); owner != n.name {
			n.owned.take(id)
			return owner, nil
		}
		n.owned.set(id, e.Revision())
		return n.name, nil
	}
	return "", errContended
}

// isWrongLastSeq reports a compare-and-swap conflict of a purge, which
// jetstream does not map to ErrKeyRevisionMismatch.
func isWrongLastSeq(err error) bool {
	c := apiCode(err)
	return c == jetstream.JSErrCodeStreamWrongLastSequence || c == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// errReplicasNotClustered is the JetStream error code of a bucket with
// more than one replica on a server that is not in a JetStream cluster.
const errReplicasNotClustered jetstream.ErrorCode = 10074

// JetStream error codes of a bucket with more replicas than servers.
const (
	errNoPeers               jetstream.ErrorCode = 10005
	errInsufficientResources jetstream.ErrorCode = 10023
)

// apiCode is the JetStream API error code of err, 0 for none.
func apiCode(err error) jetstream.ErrorCode {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.ErrorCode
	}
	return 0
}

// Owns reports whether this node holds a claim of client id.
func (n *Node) Owns(id string) bool {
	n.owned.mu.Lock()
	defer n.owned.mu.Unlock()
	_, ok := n.owned.ids[id]
	return ok
}

func (o *ownership) set(id string, rev uint64) {
	o.mu.Lock()
	o.ids[id] = rev
	o.mu.Unlock()
}

func (o *ownership) take(id string) (uint64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	rev, ok := o.ids[id]
	delete(o.ids, id)
	return rev, ok
}

// handoverSubject is where node asks for the ids it owned.
func handoverSubject(cluster, node string) string {
	b := []byte("mqttd." + cluster + ".h.")
	return string(appendLevel(b, node))
}

// Handover headers.
const (
	hdrClient = "Mqttd-Client"
	hdrClean  = "Mqttd-Clean"
	hdrMore   = "Mqttd-More"
)

// HandoverFunc gives up client id on the previous owner's node: its
// connection, if any, is closed (Session taken over); unless clean (the
// new connection starts a fresh session), the session is returned,
// encoded by the broker, and nil when there is none.
type HandoverFunc func(id string, clean bool) []byte

// ServeHandover answers other nodes' handover requests with fn, on a
// goroutine of the NATS connection: one request at a time.
func (n *Node) ServeHandover(fn HandoverFunc) error {
	sub, err := n.nc.Subscribe(handoverSubject(n.cluster, n.name), func(msg *nats.Msg) {
		id := msg.Header.Get(hdrClient)
		n.owned.take(id)
		state := fn(id, msg.Header.Get(hdrClean) == "1")
		n.stats.handedOver.Add(1)
		n.replyChunks(msg.Reply, state)
	})
	if err != nil {
		return fmt.Errorf("cluster: serving handovers: %w", err)
	}
	n.mu.Lock()
	n.handovers = sub
	n.mu.Unlock()
	return nil
}

// replyChunks sends state to reply in parts of at most handoverChunk
// bytes, each but the last marked with hdrMore.
func (n *Node) replyChunks(reply string, state []byte) {
	for {
		part := state[:min(len(state), handoverChunk)]
		state = state[len(part):]
		msg := &nats.Msg{Subject: reply, Data: part, Header: nats.Header{}}
		if len(state) > 0 {
			msg.Header.Set(hdrMore, "1")
		}
		if err := n.nc.PublishMsg(msg); err != nil {
			n.log.Warn().Err(err).Msg("cluster: answering a handover")
			return
		}
		if len(state) == 0 {
			return
		}
	}
}

// Handover asks node prev, which owned client id before this node
// claimed it, to give it up, and returns the session it sends (nil for
// none, or when the new connection is clean). A node that does not
// answer is taken to be gone: Handover then returns nil and no error,
// and prev, if it comes back, finds it no longer owns the id.
func (n *Node) Handover(prev, id string, clean bool) ([]byte, error) {
	if prev == "" || prev == n.name {
		return nil, nil
	}
	n.stats.takeovers.Add(1)
	inbox := n.nc.NewRespInbox()
	sub, err := n.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	req := &nats.Msg{Subject: handoverSubject(n.cluster, prev), Reply: inbox, Header: nats.Header{}}
	req.Header.Set(hdrClient, id)
	if clean {
		req.Header.Set(hdrClean, "1")
	}
	if err := n.nc.PublishMsg(req); err != nil {
		return nil, err
	}
	var state []byte
	for {
		msg, err := sub.NextMsg(handoverTimeout)
		if errors.Is(err, nats.ErrTimeout) {
			n.log.Info().Str("client_id", id).Str("previous_node", prev).Msg("cluster: previous owner did not answer; its session is not moved")
			return nil, nil
		}
		if errors.Is(err, nats.ErrNoResponders) { // prev is gone
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if len(state)+len(msg.Data) > MaxHandover {
			return nil, fmt.Errorf("cluster: session of %q larger than %d bytes", id, MaxHandover)
		}
		state = append(state, msg.Data...)
		if msg.Header.Get(hdrMore) == "" {
			if len(state) == 0 {
				return nil, nil
			}
			return state, nil
		}
	}
}

// validReplicas checks Config.Replicas.
func validReplicas(r int) error {
	if r < 0 || r > 5 {
		return fmt.Errorf("%d: from 1 to 5 (JetStream's limit), or 0 for the default", r)
	}
	return nil
}
