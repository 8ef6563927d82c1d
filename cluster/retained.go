package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Retained messages replicated. The retained stream captures every
// message sent on the cluster's retained subjects and keeps the latest
// of each (one per topic; a deletion is kept as its empty message), so
// that a node that was away, or on the other side of a netsplit, finds
// every retained message set meanwhile. Each node reads the stream from
// the last message of every subject on, in the stream's order, and
// keeps what it reads (Keeper), its own messages included: every node
// applies the same sequence and ends with the same retained messages,
// whichever node's publication reached the stream last. Delivery to the
// subscribers connected at the time stays on core NATS, as for any
// message: what the stream gives is only kept, never routed.

// RetainedLimits bound the retained stream: past either the oldest
// messages (of topics not set since) go, as JetStream discards them.
type RetainedLimits struct {
	// Messages is the most retained messages kept (topics, deletions
	// included); 0: no bound.
	Messages int64
	// Bytes is the most bytes kept; 0: no bound.
	Bytes int64
}

func retainedStream(cluster string) string { return "mqttd_" + cluster + "_retained" }

// SetRetainedKeeper sets what keeps a retained message read from the
// replicated stream: store it (an empty payload deletes), do not route
// it. Call it before Watch, which starts reading.
func (n *Node) SetRetainedKeeper(keep func(*Message)) { n.keep = keep }

// openRetained binds the retained stream, or creates it.
func (n *Node) openRetained(ctx context.Context, js jetstream.JetStream, replicas int) error {
	cfg := jetstream.StreamConfig{
		Name:              retainedStream(n.cluster),
		Description:       "mqttd: the latest retained message of each topic",
		Subjects:          []string{keptPrefix(n.cluster) + ">"},
		MaxMsgsPerSubject: 1,
		MaxMsgs:           n.retainedLimits.Messages,
		MaxBytes:          n.retainedLimits.Bytes,
		Discard:           jetstream.DiscardOld,
		Storage:           jetstream.FileStorage,
	}
	if cfg.MaxMsgs == 0 {
		cfg.MaxMsgs = -1
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = -1
	}
	_, err := js.Stream(ctx, cfg.Name)
	if err == nil || !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	return withReplicas(cfg.Name, replicas, func(r int) error {
		cfg.Replicas = r
		_, err := js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil
		}
		return err
	})
}

// withReplicas runs create with replicas (0: DefaultReplicas, or 1 where
// JetStream is not clustered) and words the error.
func withReplicas(name string, replicas int, create func(r int) error) error {
	r := replicas
	if r == 0 {
		r = DefaultReplicas
	}
	err := create(r)
	if err != nil && replicas == 0 && apiCode(err) == errReplicasNotClustered {
		r = 1
		err = create(r)
	}
	switch c := apiCode(err); {
	case c == errNoPeers || c == errInsufficientResources:
		return fmt.Errorf("%s needs %d JetStream servers (cluster.replicas; waiting for them to join): %w", name, r, err)
	case err != nil:
		return fmt.Errorf("%s (replicas %d): %w", name, r, err)
	}
	return nil
}

// readRetained reads the retained stream until Close, or until the next
// call (a node back from a cut-off reads it all again): the last message
// of every topic, then each new one, handing each to the keeper. It
// returns once the reader has caught up with the stream (or after
// 4*storeTimeout), so that a node accepts clients with the retained
// messages set while it was away.
func (n *Node) readRetained(st *kvStore) {
	if n.keep == nil {
		return
	}
	n.mu.Lock()
	if n.retainedRead != nil {
		n.retainedRead.Stop()
		n.retainedRead = nil
	}
	n.mu.Unlock()
	n.Retry(func() bool {
		cc, caught, err := n.consumeRetained(st)
		if err != nil {
			if n.warn.allow() {
				n.log.Warn().Err(err).Msg("cluster: the retained messages of the other nodes not read yet; trying again")
			}
			return false
		}
		n.mu.Lock()
		n.retainedRead = cc
		n.mu.Unlock()
		select {
		case <-caught:
		case <-n.stopLive:
		case <-time.After(4 * storeTimeout):
			n.log.Warn().Msg("cluster: the retained messages of the other nodes not all read yet; accepting clients")
		}
		return true
	})
}

// consumeRetained starts reading the retained stream; caught is closed
// once the reader has had every message there was when it started.
func (n *Node) consumeRetained(st *kvStore) (cc jetstream.ConsumeContext, caught <-chan struct{}, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	cons, err := st.js.OrderedConsumer(ctx, retainedStream(n.cluster), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{keptPrefix(n.cluster) + ">"},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		// The client makes the consumer again (a missed heartbeat, the
		// connection back) holding the lock Stop takes, by default
		// trying without end: with the meta group lost, Close would
		// wait for ever. One attempt (at most 10 s) a time; the next
		// error starts another.
		MaxResetAttempts: 1,
	})
	if err != nil {
		return nil, nil, err
	}
	done := make(chan struct{})
	var once sync.Once
	stream, err := st.js.Stream(ctx, retainedStream(n.cluster))
	if err != nil {
		return nil, nil, err
	}
	if stream.CachedInfo().State.Msgs == 0 {
		once.Do(func() { close(done) })
	}
	cc, err = cons.Consume(func(msg jetstream.Msg) {
		meta, merr := msg.Metadata()
		defer func() {
			if merr == nil && meta.NumPending == 0 {
				once.Do(func() { close(done) })
			}
		}()
		subj := retainedPrefix(n.cluster) + strings.TrimPrefix(msg.Subject(), keptPrefix(n.cluster))
		m, err := decodeMsg(n.cluster, subj, msg.Headers(), msg.Data())
		if err != nil {
			n.stats.malformed.Add(1)
			return
		}
		if merr == nil {
			m.Age = time.Since(meta.Timestamp)
		}
		n.stats.retainedKept.Add(1)
		n.keep(m)
	})
	return cc, done, err
}
