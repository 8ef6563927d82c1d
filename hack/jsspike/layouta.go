package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// sessionStream is layout A: one stream for every session's state,
// subjects S.<cluster>.<client id>.{rec,m.<seq>,rel.<pid>}, one message
// per subject (a record replaces the one before it; an entry's subject
// is its own), read from any replica (AllowDirect), written in atomic
// batches, deleted by tombstones with a TTL. The client ids here need
// no escaping; the broker's would (cluster.Subject's escape).
func sessionStream(name string, markerTTL time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:                   name,
		Subjects:               []string{name + ".>"},
		Storage:                jetstream.FileStorage,
		Replicas:               3,
		MaxMsgsPerSubject:      1,
		AllowDirect:            true,
		AllowAtomicPublish:     true,
		AllowMsgTTL:            true,
		SubjectDeleteMarkerTTL: markerTTL,
	}
}

// sessions is what layout A's fill wrote: each session's queued entries'
// subjects and stream sequences, in order.
type sessions struct {
	prefix []string   // S.c1.<id>.
	subj   [][]string // entries' subjects
	seq    [][]uint64 // entries' stream sequences
}

func clientID(i int) string { return "cl" + strconv.Itoa(i) }

// fill writes cfg.sessions sessions, each a record, cfg.queued entries
// and one id awaiting PUBREL, in atomic batches of cfg.fillBatch mixing
// sessions as a committer's window would. A batch's messages get
// consecutive sequences, its acknowledgement the last.
func fill(cfg config, nc *nats.Conn, stream string) (*sessions, row, error) {
	s := &sessions{
		prefix: make([]string, cfg.sessions),
		subj:   make([][]string, cfg.sessions),
		seq:    make([][]uint64, cfg.sessions),
	}
	r := row{Phase: fmt.Sprintf("2A fill, batches of %d", cfg.fillBatch)}
	rec, data, rel := payload(200), payload(cfg.size), payload(8)
	var batch []entry
	var owners []int // for each batch entry, its session, or -1
	var lat latencies
	flush := func() error {
		t := time.Now()
		ack, err := publishBatch(nc, batch, cfg.timeout)
		if err != nil {
			return err
		}
		lat = append(lat, time.Since(t))
		first := ack.Seq - uint64(len(batch)) + 1
		for i, o := range owners {
			if o >= 0 {
				s.subj[o] = append(s.subj[o], batch[i].subject)
				s.seq[o] = append(s.seq[o], first+uint64(i))
			}
		}
		r.Msgs += len(batch)
		batch, owners = batch[:0], owners[:0]
		return nil
	}
	add := func(e entry, owner int) error {
		batch, owners = append(batch, e), append(owners, owner)
		if len(batch) == cfg.fillBatch {
			return flush()
		}
		return nil
	}
	start := time.Now()
	for i := range cfg.sessions {
		p := stream + ".c1." + clientID(i) + "."
		s.prefix[i] = p
		if err := add(entry{subject: p + "rec", data: rec}, -1); err != nil {
			return nil, r, err
		}
		for q := range cfg.queued {
			if err := add(entry{subject: p + "m." + strconv.Itoa(q+1), data: data}, i); err != nil {
				return nil, r, err
			}
		}
		if err := add(entry{subject: p + "rel.7", data: rel}, -1); err != nil {
			return nil, r, err
		}
	}
	if len(batch) > 0 {
		if err := flush(); err != nil {
			return nil, r, err
		}
	}
	r.Elapsed, r.Commits = time.Since(start), len(lat)
	r.P50, r.P99 = lat.pct(0.5), lat.pct(0.99)
	r.Note = fmt.Sprintf("%d sessions × (record + %d entries + 1 PUBREL id)", cfg.sessions, cfg.queued)
	return s, r, nil
}

// loadWays are the ways a node taking a session over can read its
// whole state: each returns the number of messages read.
var loadWays = []struct {
	name string
	load func(ctx context.Context, cfg config, nc *nats.Conn, js jetstream.JetStream, stream, prefix string) (int, error)
}{
	{"ordered consumer, filter <id>.>", loadOrdered},
	{"direct get, multi_last <id>.>", func(_ context.Context, cfg config, nc *nats.Conn, _ jetstream.JetStream, stream, prefix string) (int, error) {
		got, err := directBatch(nc, stream, map[string]any{"multi_last": []string{prefix + ">"}, "batch": 1024}, cfg.timeout)
		return len(got), err
	}},
	{"direct get, batch next_by_subj <id>.>", func(_ context.Context, cfg config, nc *nats.Conn, _ jetstream.JetStream, stream, prefix string) (int, error) {
		got, err := directBatch(nc, stream, map[string]any{"seq": 1, "next_by_subj": prefix + ">", "batch": 1024}, cfg.timeout)
		return len(got), err
	}},
}

// loadOrdered reads a session's messages with an ordered consumer
// (ephemeral, R1, on the stream's leader), until the one that says
// nothing is pending after it, and deletes the consumer.
func loadOrdered(ctx context.Context, cfg config, _ *nats.Conn, js jetstream.JetStream, stream, prefix string) (int, error) {
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{prefix + ">"}})
	if err != nil {
		return 0, fmt.Errorf("create: %w", err)
	}
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			js.DeleteConsumer(ctx, stream, info.Name)
		}
	}()
	n := 0
	deadline := time.Now().Add(cfg.timeout)
	for time.Now().Before(deadline) {
		batch, err := cons.Fetch(1024, jetstream.FetchMaxWait(cfg.timeout))
		if err == nil && n == 0 {
			// Fetch learns of no responders only as it reads.
			if first, ok := <-batch.Messages(); ok {
				n++
				if md, err := first.Metadata(); err != nil || md.NumPending == 0 {
					return n, err
				}
			} else {
				err = batch.Error()
			}
		}
		if errors.Is(err, nats.ErrNoResponders) {
			// The consumer's leader may be another server, whose
			// interest in the pull subject reaches ours a moment later.
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			return n, fmt.Errorf("fetch: %w", err)
		}
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return n, err
			}
			if md.NumPending == 0 {
				return n, nil
			}
		}
		if err := batch.Error(); err != nil {
			return n, fmt.Errorf("fetch: %w", err)
		}
	}
	return n, fmt.Errorf("ordered consumer: %d messages in %v, more pending", n, cfg.timeout)
}

// measureLoads loads cfg.loads random sessions each way; every load
// must return the session's every message.
func measureLoads(ctx context.Context, cfg config, nc *nats.Conn, js jetstream.JetStream, stream string, s *sessions) ([]row, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	picks := make([]int, cfg.loads)
	for i := range picks {
		picks[i] = rng.IntN(len(s.prefix))
	}
	want := cfg.queued + 2
	var rows []row
	for _, way := range loadWays {
		r := row{Phase: "2A load one session: " + way.name}
		var lat latencies
		start := time.Now()
		for _, p := range picks {
			t := time.Now()
			n, err := way.load(ctx, cfg, nc, js, stream, s.prefix[p])
			if err != nil {
				return rows, fmt.Errorf("%s: %w", way.name, err)
			}
			if n != want {
				return rows, fmt.Errorf("%s: session %d: %d messages, want %d", way.name, p, n, want)
			}
			lat = append(lat, time.Since(t))
			r.Msgs += n
		}
		r.Elapsed, r.Commits = time.Since(start), len(lat)
		r.P50, r.P99 = lat.pct(0.5), lat.pct(0.99)
		r.Note = "latency per session"
		rows = append(rows, r)
	}
	return rows, nil
}
