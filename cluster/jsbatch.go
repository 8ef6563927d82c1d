package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Atomic batches and whole reads of a JetStream stream: the replicated
// sessions' writes and reads (sessions.go). nats.go v1.56 has no helper
// for atomic batches; the headers are the server's (Nats-Batch-Id,
// Nats-Batch-Sequence, Nats-Batch-Commit).

// maxAtomic is the most messages nats-server takes in one atomic batch
// (its default max_batch_size).
const maxAtomic = 1000

// tombstoneTTL is how long a deleted record's empty message stays: the
// stream keeps one message per subject, and a tombstone that expires
// leaves nothing, so that a million put and delete cycles leave the
// stream empty. Long enough for every replica to have applied it.
const tombstoneTTL = "1s"

// stateMsg is one message of an atomic batch; nil data is a tombstone.
type stateMsg struct {
	subject string
	data    []byte
	ttl     string // Nats-TTL: "" none, or tombstoneTTL when data is nil
}

// batchIDs numbers this process's batches; a batch id must be unique
// among a stream's open batches, across nodes too (batchPrefix).
var batchIDs atomic.Uint64

// streamAck is a JetStream publish acknowledgement.
type streamAck struct {
	Seq   uint64 `json:"seq"`
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// StoreWrites counts a SessionStore's writes to the stream: Commits
// (the batches of the broker's commits that wrote to it), RoundTrips
// (atomic batches sent, each confirmed by a quorum of the stream's
// replicas: one per commit of at most maxAtomic records, and one more
// for each sent again) and Records (the stream messages written).
type StoreWrites struct {
	Commits, RoundTrips, Records uint64
}

// storeWrites is StoreWrites as the writes count it.
type storeWrites struct {
	commits, roundTrips, records atomic.Uint64
}

// settleAttempts bounds how many times publishAtomic waits out one
// batch's answer: a stream whose leader died answers nobody until its
// replicas have elected another, which takes NATS 4 to 9 s, and the
// batch the dead leader had replicated to a quorum is then kept.
const settleAttempts = 5

// errUnsettled is a batch that may or may not have been kept: no send of
// it was answered.
var errUnsettled = errors.New("cluster: no answer from the session stream; the batch may have been stored")

// publishAtomic writes msgs in order, in atomic batches of at most
// maxAtomic messages, each confirmed once a quorum of the stream's
// replicas holds it. It returns an error only once the batch is known
// not stored, or could not be settled (errUnsettled): a failed write
// makes the broker refuse the messages it carried, and a refused
// message that was stored after all would be delivered twice.
//
// A commit nobody can answer (the stream's interest not yet reached
// this server, a leader being elected) was not received, and is sent
// again until timeout. A commit unanswered within timeout may have been
// kept, or still be kept, and is sent again, the same messages under a
// new batch id, until one send is answered, for up to settleAttempts
// times timeout. Sending the same batch twice is harmless: the stream
// keeps one message per subject, and a later send of a batch is applied
// after the earlier one or not at all (the stream's log is ordered, and
// the writer sends nothing else until this returns). It counts what it
// sends in w.
func publishAtomic(nc *nats.Conn, prefix string, msgs []stateMsg, timeout time.Duration, w *storeWrites) error {
	start := time.Now()
	definite, settle := start.Add(timeout), start.Add(settleAttempts*timeout)
	w.commits.Add(1)
	for len(msgs) > 0 {
		n := min(len(msgs), maxAtomic)
		unanswered, sends := false, 0
		err := nats.ErrTimeout // nothing sent: no time was given
		for {
			deadline := definite
			if unanswered {
				deadline = settle
			}
			wait := min(timeout, time.Until(deadline))
			if wait <= 0 {
				break
			}
			sends++
			w.roundTrips.Add(1)
			if err = sendAtomic(nc, prefix, msgs[:n], wait); err == nil {
				w.records.Add(uint64(n))
				break
			}
			if errors.Is(err, nats.ErrTimeout) {
				unanswered = true
				continue
			}
			if !errors.Is(err, nats.ErrNoResponders) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		switch {
		case err == nil:
		case unanswered && errors.Is(err, nats.ErrTimeout):
			return fmt.Errorf("%w (%d sends in %v)", errUnsettled, sends, time.Since(start).Round(time.Millisecond))
		case unanswered:
			return fmt.Errorf("%w: then %w", errUnsettled, err)
		default:
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

func sendAtomic(nc *nats.Conn, prefix string, msgs []stateMsg, timeout time.Duration) error {
	id := prefix + strconv.FormatUint(batchIDs.Add(1), 36)
	for i, e := range msgs {
		m := nats.NewMsg(e.subject)
		m.Data = e.data
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		switch {
		case e.data == nil:
			m.Header.Set("Nats-TTL", tombstoneTTL)
		case e.ttl != "":
			m.Header.Set("Nats-TTL", e.ttl)
		}
		if i < len(msgs)-1 {
			if err := nc.PublishMsg(m); err != nil {
				return err
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		reply, err := nc.RequestMsg(m, timeout)
		if err != nil {
			return err
		}
		var ack streamAck
		if err := json.Unmarshal(reply.Data, &ack); err != nil {
			return fmt.Errorf("batch acknowledgement %q: %w", reply.Data, err)
		}
		if ack.Error != nil {
			return fmt.Errorf("stream refused the batch: %s (%d)", ack.Error.Description, ack.Error.ErrCode)
		}
	}
	return nil
}

// readPage is how many messages one fetch asks for.
const readPage = 1024

// readIdle is how long the server keeps a read's consumer unused.
const readIdle = 30 * time.Second

// errReadGap is a read that missed a message of its consumer.
var errReadGap = errors.New("cluster: a message of the stream missed in reading it")

// readAll reads every message of stream on subjects matching filter, in
// stream order, calling fn with each one's subject and data. It reads
// through a consumer on the stream's leader (leaderConsumer): a direct
// get may be answered by any replica, one that lags too (a node's own
// server just back from a netsplit), and a session read from it could
// miss messages a quorum acknowledged.
//
// It gives up once ctx has ended, give or take a fetch (a second).
func readAll(ctx context.Context, js jetstream.JetStream, stream, filter string, fn func(subject string, data []byte) error) error {
	for {
		err := readOnce(ctx, js, stream, filter, fn)
		// A stream just made, or whose leader is being elected, does not
		// answer, or fails the consumer's making: read again from the
		// start (fn takes a subject's later message over its earlier)
		// until ctx ends. What fn refused, and a stream that is not
		// there, are final.
		var refused fnError
		if err == nil || errors.As(err, &refused) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// leaderConsumer makes a consumer of stream for a read, on the server
// that leads the stream. Not jetstream's ordered consumer: it makes its
// consumer again for each fetch, a round trip through the meta group
// each, retrying without end and without regard to ctx (a node whose
// meta group was lost, the other nodes closed, read forever, and its
// Close waited for that). This one is made once, under ctx; a fetch is
// bounded by the client (NoWait: a second), and a gap in the consumer's
// sequence (a message lost on the way) fails the read, which readAll
// starts again.
//
// A consumer of one replica is placed on any server of the stream's,
// and reads that server's copy: one that lags (just back from a
// netsplit) would miss messages a quorum acknowledged. One placed
// elsewhere than the leader is left, and another made.
func leaderConsumer(ctx context.Context, js jetstream.JetStream, stream, filter string) (jetstream.Consumer, error) {
	for {
		cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
			FilterSubject: filter,
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy:     jetstream.AckNonePolicy,
			// Not deleted after the read, which would cost a round trip:
			// the server drops it once it has been unused this long.
			InactiveThreshold: readIdle,
			Replicas:          1,
			MemoryStorage:     true,
		})
		if err != nil {
			return nil, err
		}
		ci := cons.CachedInfo()
		if ci.Cluster == nil {
			return cons, nil // JetStream not clustered: one copy
		}
		st, err := js.Stream(ctx, stream)
		if err != nil {
			return nil, err
		}
		si := st.CachedInfo()
		switch {
		case si.Cluster == nil || si.Cluster.Leader == ci.Cluster.Leader:
			return cons, nil
		case si.Cluster.Leader == "":
			return nil, errNoLeader // readAll tries again shortly
		}
	}
}

// errNoLeader is a stream whose leader is being elected.
var errNoLeader = errors.New("cluster: the stream has no leader")

// fnError is an error of readAll's fn, which reading again would meet
// again.
type fnError struct{ error }

func (e fnError) Unwrap() error { return e.error }

func readOnce(ctx context.Context, js jetstream.JetStream, stream, filter string, fn func(subject string, data []byte) error) error {
	cons, err := leaderConsumer(ctx, js, stream, filter)
	if err != nil {
		return err
	}
	if cons.CachedInfo().NumPending == 0 {
		return nil
	}
	var seq uint64 // the consumer's sequence of the last message read
	for {
		batch, err := cons.FetchNoWait(readPage)
		if err != nil {
			return err
		}
		n, last := 0, false
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			if md.Sequence.Consumer != seq+1 {
				return fmt.Errorf("%w: message %d after %d", errReadGap, md.Sequence.Consumer, seq)
			}
			seq, last = md.Sequence.Consumer, md.NumPending == 0
			if err := fn(m.Subject(), m.Data()); err != nil {
				return fnError{err}
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return err
		}
		if last {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		// None, though some were pending: they may have gone since (a
		// record's TTL ran out), or the fetch came before the consumer
		// was ready. What the consumer has pending now says which.
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending == 0 {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}
