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

// readAll reads every message of stream on subjects matching filter, in
// stream order, calling fn with each one's subject and data. It reads
// through an ordered consumer, which the stream's leader serves: a
// direct get may be answered by any replica, one that lags too (a node's
// own server just back from a netsplit), and a session read from it
// could miss messages a quorum acknowledged.
func readAll(ctx context.Context, js jetstream.JetStream, stream, filter string, fn func(subject string, data []byte) error) error {
	for {
		err := readOnce(ctx, js, stream, filter, fn)
		// A stream just made, or whose leader is being elected, does not
		// answer: read again from the start (fn takes a subject's later
		// message over its earlier) until ctx ends.
		if err == nil || !(errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func readOnce(ctx context.Context, js jetstream.JetStream, stream, filter string, fn func(subject string, data []byte) error) error {
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return err
	}
	for {
		batch, err := cons.FetchNoWait(readPage)
		if err != nil {
			return err
		}
		n, last := 0, true
		for m := range batch.Messages() {
			n++
			if md, err := m.Metadata(); err == nil {
				last = md.NumPending == 0
			}
			if err := fn(m.Subject(), m.Data()); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return err
		}
		if n > 0 && last {
			return nil
		}
		// No message, though the consumer was made with some pending
		// (a fetch that came before the consumer was ready): fetch
		// again. One made with none pending has read everything.
		if info := cons.CachedInfo(); n == 0 && (info == nil || info.NumPending == 0) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if n == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
}
