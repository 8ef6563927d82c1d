package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// quorumStream is phase 1's stream: R3 on files, atomic batches allowed.
func quorumStream(name string) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:               name,
		Subjects:           []string{name + ".>"},
		Storage:            jetstream.FileStorage,
		Replicas:           3,
		AllowAtomicPublish: true,
	}
}

// measureQuorum is phase 1: what a write confirmed by a quorum costs,
// one at a time, with a window of acknowledgements outstanding, and in
// atomic batches (one acknowledgement for the batch). Every mode writes
// cfg.writes messages on subjects of its own; the stream's count is
// checked against what was acknowledged.
func measureQuorum(ctx context.Context, cfg config, nc *nats.Conn, js jetstream.JetStream) ([]row, error) {
	stream, err := js.CreateStream(ctx, quorumStream("Q"))
	if err != nil {
		return nil, err
	}
	defer js.DeleteStream(ctx, "Q")
	data := payload(cfg.size)
	var rows []row
	r, err := writeSync(ctx, cfg, js, data)
	if err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	rows = append(rows, r)
	for _, w := range []int{100, 1000} {
		r, err := writeAsync(cfg, nc, w, data)
		if err != nil {
			return nil, fmt.Errorf("async %d: %w", w, err)
		}
		rows = append(rows, r)
	}
	for _, b := range cfg.batches {
		r, err := writeBatches(cfg, nc, b, data)
		if err != nil {
			return nil, fmt.Errorf("batches of %d: %w", b, err)
		}
		rows = append(rows, r)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	written := 0
	for _, r := range rows {
		written += r.Msgs
	}
	if info.State.Msgs != uint64(written) {
		return rows, fmt.Errorf("stream holds %d messages, %d acknowledged", info.State.Msgs, written)
	}
	return rows, nil
}

func writeSync(ctx context.Context, cfg config, js jetstream.JetStream, data []byte) (row, error) {
	r := row{Phase: "1 publish, ack, one at a time"}
	var lat latencies
	start := time.Now()
	for i := 0; i < cfg.writes && time.Since(start) < cfg.phaseTime; i++ {
		t := time.Now()
		if _, err := js.Publish(ctx, "Q.sync."+strconv.Itoa(i), data); err != nil {
			return r, err
		}
		lat = append(lat, time.Since(t))
	}
	r.Elapsed = time.Since(start)
	r.Msgs, r.Commits = len(lat), len(lat)
	r.P50, r.P99 = lat.pct(0.5), lat.pct(0.99)
	return r, nil
}

// writeAsync publishes with at most window acknowledgements outstanding;
// a message's latency runs from its publish to its acknowledgement.
func writeAsync(cfg config, nc *nats.Conn, window int, data []byte) (row, error) {
	r := row{Phase: fmt.Sprintf("1 async, window %d", window)}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(window))
	if err != nil {
		return r, err
	}
	type sent struct {
		f jetstream.PubAckFuture
		t time.Time
	}
	pending := make(chan sent, window)
	done := make(chan error, 1)
	var lat latencies
	go func() {
		for s := range pending {
			select {
			case <-s.f.Ok():
				lat = append(lat, time.Since(s.t))
			case err := <-s.f.Err():
				done <- err
				for range pending {
				}
				return
			}
		}
		done <- nil
	}()
	start := time.Now()
	for i := 0; i < cfg.writes && time.Since(start) < cfg.phaseTime; i++ {
		t := time.Now()
		f, err := js.PublishAsync(fmt.Sprintf("Q.async%d.%d", window, i), data)
		if err != nil {
			close(pending)
			<-done
			return r, err
		}
		pending <- sent{f, t}
	}
	close(pending)
	if err := <-done; err != nil {
		return r, err
	}
	r.Elapsed = time.Since(start)
	r.Msgs, r.Commits = len(lat), len(lat)
	r.P50, r.P99 = lat.pct(0.5), lat.pct(0.99)
	r.Note = "latency per message"
	return r, nil
}

// writeBatches commits size messages at a time, one batch after the
// other, as a committer would: each batch is one round trip.
func writeBatches(cfg config, nc *nats.Conn, size int, data []byte) (row, error) {
	r := row{Phase: fmt.Sprintf("1 atomic batch of %d", size)}
	var lat latencies
	msgs := make([]entry, size)
	start := time.Now()
	for n := 0; n+size <= max(cfg.writes, size) && time.Since(start) < cfg.phaseTime; n += size {
		for i := range msgs {
			msgs[i] = entry{subject: fmt.Sprintf("Q.b%d.%d", size, n+i), data: data}
		}
		t := time.Now()
		ack, err := publishBatch(nc, msgs, cfg.timeout)
		if err != nil {
			return r, err
		}
		if ack.Count != size {
			return r, fmt.Errorf("batch acknowledged %d of %d", ack.Count, size)
		}
		lat = append(lat, time.Since(t))
		r.Msgs += size
	}
	r.Elapsed = time.Since(start)
	r.Commits = len(lat)
	r.P50, r.P99 = lat.pct(0.5), lat.pct(0.99)
	r.Note = "latency per batch"
	return r, nil
}
