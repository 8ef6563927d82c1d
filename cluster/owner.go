package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
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
	// claimAttempts bounds the compare-and-swap rounds of one claim, and
	// claimBackoff is the pause before the second, doubled before each
	// later one (with jitter): while a bucket's stream elects a leader a
	// read can come from a replica that is behind, and an immediate
	// retry reads the same stale answer.
	claimAttempts = 8
	claimBackoff  = 10 * time.Millisecond
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
	// Each step with a timeout of its own: a step JetStream does not
	// answer (its meta group busy with another node's creating the same
	// bucket) fails soon, and bindStore tries again.
	step := func(f func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		defer cancel()
		return f(ctx)
	}
	st := &kvStore{js: js}
	buckets := []struct {
		kv         *jetstream.KeyValue
		name, desc string
		markers    time.Duration
	}{
		{&st.owners, ownersBucket(n.cluster), "mqttd: the node owning each client id", markerTTL},
		{&st.nodes, nodesBucket(n.cluster), "mqttd: each node's beats", 0},
		{&st.wills, willsBucket(n.cluster), "mqttd: the wills of each node's connected clients", markerTTL},
	}
	for _, b := range buckets {
		err := step(func(ctx context.Context) (err error) {
			*b.kv, err = n.bucket(ctx, js, b.name, b.desc, b.markers, replicas)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("bucket %s: %w", b.name, err)
		}
	}
	if err := step(func(ctx context.Context) error { return n.openRetained(ctx, js, replicas) }); err != nil {
		return nil, fmt.Errorf("stream %s: %w", retainedStream(n.cluster), err)
	}
	// The node's first beat comes before any of its wills: the others
	// know of every node whose wills they may have to publish.
	err := step(func(ctx context.Context) error {
		_, err := st.nodes.Put(ctx, nodeKey(n.name), []byte(n.name))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("first beat: %w", err)
	}
	return st, nil
}

// bucket binds key-value bucket name, or creates it with replicas (0:
// DefaultReplicas, or 1 where JetStream is not clustered). It makes the
// bucket's stream itself, as the jetstream client would but with direct
// gets off: a direct get may be answered by any replica, a lagging one
// too (this node's own server, just back from a netsplit), and an owner
// or will read from it would decide on a stale record. Reads then go to
// the stream's leader, which also decides the compare-and-swap writes.
// markerTTL, when not 0, keeps purge markers that long.
func (n *Node) bucket(ctx context.Context, js jetstream.JetStream, name, desc string, markerTTL time.Duration, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, name)
	if err == nil || !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, err
	}
	cfg := jetstream.StreamConfig{
		Name:                   "KV_" + name,
		Description:            desc,
		Subjects:               []string{"$KV." + name + ".>"},
		MaxMsgsPerSubject:      1,
		MaxMsgs:                -1,
		MaxBytes:               -1,
		MaxMsgSize:             -1,
		MaxConsumers:           -1,
		Storage:                jetstream.FileStorage,
		AllowRollup:            true,
		DenyDelete:             true,
		Duplicates:             2 * time.Minute,
		Discard:                jetstream.DiscardNew,
		AllowMsgTTL:            markerTTL > 0,
		SubjectDeleteMarkerTTL: markerTTL,
	}
	err = withReplicas("replicas of "+name, replicas, func(r int) error {
		cfg.Replicas = r
		_, err := js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return js.KeyValue(ctx, name)
}

// StoreReady reports whether the node has its replicated store bound.
func (n *Node) StoreReady() bool { return n.store.Load() != nil }

// Claim is what a claim of a client id found and made.
type Claim struct {
	// Prev is the node that owned the id before ("" for none, or this
	// node's own name), to be asked for a Handover.
	Prev string
	// Rev is the revision of this node's claim: Release and Holds take
	// it, and Handover carries it, so that a request older than the
	// previous owner's own later claim is not obeyed.
	Rev uint64
	// SameUser says the id's session was the claiming user's.
	SameUser bool
}

// ErrOtherUser is returned by Claim for a client id another user's
// session holds, when the broker refuses to replace it.
var ErrOtherUser = errors.New("cluster: the client id belongs to another user's session")

// ownerValue is an owner record: the node, then the session's user.
func ownerValue(node, user string) []byte { return []byte(node + "\x00" + user) }

func parseOwner(v []byte) (node, user string) {
	node, user, _ = strings.Cut(string(v), "\x00")
	return node, user
}

// Claim makes this node the owner of client id for user's session. It
// returns ErrOtherUser, claiming nothing, when the id is another user's
// and refuseOther is set (auth.other_user_session: refuse), and
// ErrNoStore while the replicated store is not reachable: the broker
// then refuses the client, which tries another node.
func (n *Node) Claim(id, user string, refuseOther bool) (Claim, error) {
	st := n.store.Load()
	if st == nil {
		return Claim{}, ErrNoStore
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	key, me := ownerKey(id), ownerValue(n.name, user)
	for attempt := range claimAttempts {
		if attempt > 0 && !pause(ctx, claimBackoff<<(attempt-1)) {
			return Claim{}, storeErr(ctx.Err())
		}
		e, err := st.owners.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			rev, err := st.owners.Create(ctx, key, me)
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			if err != nil {
				return Claim{}, storeErr(err)
			}
			n.owned.set(id, rev)
			return Claim{Rev: rev}, nil
		}
		if err != nil {
			return Claim{}, storeErr(err)
		}
		prev, owner := parseOwner(e.Value())
		if refuseOther && owner != user {
			return Claim{}, ErrOtherUser
		}
		rev, err := st.owners.Update(ctx, key, me, e.Revision())
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return Claim{}, storeErr(err)
		}
		n.owned.set(id, rev)
		return Claim{Prev: prev, Rev: rev, SameUser: owner == user}, nil
	}
	return Claim{}, errContended
}

// pause waits d plus up to half of d more, chosen at random so that
// contending nodes do not retry in step; false when ctx ends first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d + rand.N(d/2+1))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Holds reports whether this node's claim rev of client id is still its
// latest: no other node's Handover request newer than it came since.
// A node checks it once the client is attached, and closes the client
// if not: a claim that lost to a newer one while it was being made.
func (n *Node) Holds(id string, rev uint64) bool {
	n.owned.mu.Lock()
	defer n.owned.mu.Unlock()
	return n.owned.ids[id] == rev
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

// Release gives up client id, whose session (claimed at rev) ended on
// this node: its key goes, unless another claim came since (this node's
// or another's: the purge is at rev). It does not wait: the node's
// releaser purges the record, and a release it cannot take (more than
// releaseQueue waiting) leaves a record naming this node, which the next
// claim of the id replaces.
func (n *Node) Release(id string, rev uint64) {
	n.owned.takeAt(id, rev)
	n.queueRelease(release{id: id, rev: rev})
}

// ReleaseOwned is Release at this node's latest claim of client id: for
// a session that ends while offline (its expiry).
func (n *Node) ReleaseOwned(id string) {
	n.owned.mu.Lock()
	rev, ok := n.owned.ids[id]
	n.owned.mu.Unlock()
	if ok {
		n.Release(id, rev)
	}
}

// queueRelease hands r to the releaser, counting it when the queue is
// full.
func (n *Node) queueRelease(r release) {
	select {
	case n.releases <- r:
	default:
		n.stats.releasesDropped.Add(1)
	}
}

// releaseQueue bounds the releases waiting for the releaser.
const releaseQueue = 4096

type release struct {
	id    string // the client id, or the will record's key
	rev   uint64
	will  bool // a will record (DropWill), not an owner's
	tries int
}

// releaseTries bounds the attempts of one release while the store does
// not answer, a second apart.
const releaseTries = 30

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
		kv, key = st.wills, r.id
	}
	err := kv.Purge(ctx, key, jetstream.LastRevision(r.rev), jetstream.PurgeTTL(markerTTL))
	if err == nil || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSeq(err) {
		return
	}
	// Again later: a will record left behind would be published for a
	// client that left normally, if this node died.
	if r.tries++; r.tries < releaseTries {
		time.AfterFunc(time.Second, func() { n.queueRelease(r) })
		return
	}
	n.stats.releasesDropped.Add(1)
	if n.warn.allow() {
		n.log.Warn().Err(err).Str("key", key).Msg("cluster: a record not taken out of the store after 30 tries")
	}
}

// Adopt claims client id for a session this node kept (restored from its
// store, or kept through a loss of the cluster) if no node owns it, and
// returns its owner: this node's name, or the node that took it
// meanwhile, to which the session now belongs.
func (n *Node) Adopt(id, user string) (owner string, err error) {
	st := n.store.Load()
	if st == nil {
		return "", ErrNoStore
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	key := ownerKey(id)
	for range claimAttempts {
		rev, err := st.owners.Create(ctx, key, ownerValue(n.name, user))
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
		if owner, _ := parseOwner(e.Value()); owner != n.name {
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

// takeAt forgets client id if this node's latest claim of it is rev.
func (o *ownership) takeAt(id string, rev uint64) {
	o.mu.Lock()
	if o.ids[id] == rev {
		delete(o.ids, id)
	}
	o.mu.Unlock()
}

// takeBefore forgets client id unless this node claimed it again at rev
// or later, and reports whether it did: a handover request carries the
// requester's claim.
func (o *ownership) takeBefore(id string, rev uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if mine, ok := o.ids[id]; ok && mine > rev {
		return false
	}
	delete(o.ids, id)
	return true
}

// validReplicas checks Config.Replicas.
func validReplicas(r int) error {
	if r < 0 || r > 5 {
		return fmt.Errorf("%d: from 1 to 5 (JetStream's limit), or 0 for the default", r)
	}
	return nil
}

// ClaimFrom makes this node the owner of client id, user's session, if
// node dead still owns it, or nobody does: a survivor taking a dead
// node's sessions over (a record's user stays its own), or a node
// restarted taking back its own. It reports false, claiming nothing,
// when another node has the id (its client reconnected there), or when
// dead was found dead and its record was written since (the dead node
// started again and took it back).
func (n *Node) ClaimFrom(id, user, dead string) (Claim, bool, error) {
	st := n.store.Load()
	if st == nil {
		return Claim{}, false, ErrNoStore
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	key := ownerKey(id)
	e, err := st.owners.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		rev, err := st.owners.Create(ctx, key, ownerValue(n.name, user))
		if errors.Is(err, jetstream.ErrKeyExists) {
			return Claim{}, false, nil
		}
		if err != nil {
			return Claim{}, false, storeErr(err)
		}
		n.owned.set(id, rev)
		return Claim{Rev: rev}, true, nil
	}
	if err != nil {
		return Claim{}, false, storeErr(err)
	}
	prev, user := parseOwner(e.Value())
	if prev != dead || e.Revision() > n.fence(dead) {
		return Claim{}, false, nil
	}
	rev, err := st.owners.Update(ctx, key, ownerValue(n.name, user), e.Revision())
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return Claim{}, false, nil
	}
	if err != nil {
		return Claim{}, false, storeErr(err)
	}
	n.owned.set(id, rev)
	return Claim{Prev: prev, Rev: rev, SameUser: true}, true, nil
}
