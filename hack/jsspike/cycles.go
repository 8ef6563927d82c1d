package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// measureCycles is layout A's bound: entries put and acknowledged, up to
// cfg.cycles or cfg.cycleTime, on a stream of their own (with and without
// subject delete markers). Each atomic batch, as a committer's round
// would, puts half a batch of new entries (each on a new subject, spread
// over cfg.sessions sessions) and tombstones the half the batch before
// put. At the end the last half is tombstoned too, and the stream must
// come back to empty once the tombstones (and markers) expire; its
// bytes and the files of its store on the three servers say what is
// left on disk.
func measureCycles(ctx context.Context, cfg config, nc *nats.Conn, js jetstream.JetStream, dir, name string, markerTTL time.Duration) (row, error) {
	r := row{Phase: "2A put+ack cycles"}
	if markerTTL > 0 {
		r.Phase += ", delete markers " + markerTTL.String()
	}
	stream, err := js.CreateStream(ctx, sessionStream(name, markerTTL))
	if err != nil {
		return r, err
	}
	defer js.DeleteStream(ctx, name)
	half := max(1, cfg.fillBatch/2)
	data := payload(cfg.size)
	var prev []string
	var lat latencies
	start := time.Now()
	n := 0
	for n < cfg.cycles && time.Since(start) < cfg.cycleTime {
		batch := make([]entry, 0, 2*half)
		var put []string
		for i := 0; i < half && n < cfg.cycles; i++ {
			s := name + ".c1." + clientID(n%cfg.sessions) + ".m." + strconv.Itoa(n)
			put = append(put, s)
			batch = append(batch, entry{subject: s, data: data})
			n++
		}
		for _, s := range prev {
			batch = append(batch, entry{subject: s, ttl: "1s"})
		}
		t := time.Now()
		if _, err := publishBatch(nc, batch, cfg.timeout); err != nil {
			return r, fmt.Errorf("cycle %d: %w", n, err)
		}
		lat = append(lat, time.Since(t))
		prev = put
	}
	r.Elapsed = time.Since(start)
	batch := make([]entry, len(prev))
	for i, s := range prev {
		batch[i] = entry{subject: s, ttl: "1s"}
	}
	if len(batch) > 0 {
		if _, err := publishBatch(nc, batch, cfg.timeout); err != nil {
			return r, err
		}
	}
	r.Msgs, r.Commits = n, len(lat)+1
	r.P50, r.P99 = lat.pct(0.5), lat.pct(0.99)
	info, err := stream.Info(ctx)
	if err != nil {
		return r, err
	}
	end := cycleEnd{msgs: info.State.Msgs, bytes: info.State.Bytes, disk: diskBytes(dir, name), at: time.Now()}
	err = end.settle(ctx, cfg, stream, dir, &r)
	return r, err
}

// cycleEnd is what a cycles stream held after its last batch.
type cycleEnd struct {
	msgs, bytes uint64
	disk        int64
	at          time.Time
}

// settle waits until the stream is empty and notes in r what it held
// at the end and then.
func (e cycleEnd) settle(ctx context.Context, cfg config, stream jetstream.Stream, dir string, r *row) error {
	if err := waitMsgs(ctx, stream, 0, cfg.timeout); err != nil {
		return err
	}
	empty := time.Since(e.at)
	info, err := stream.Info(ctx)
	if err != nil {
		return err
	}
	r.Note = fmt.Sprintf("at end: %d msgs/%d B in stream, %d KiB on disk (3 nodes); empty %v after the last batch: %d msgs, %d B, %d KiB on disk, first seq %d",
		e.msgs, e.bytes, e.disk>>10, empty.Round(time.Millisecond), info.State.Msgs, info.State.Bytes, diskBytes(dir, info.Config.Name)>>10, info.State.FirstSeq)
	if r.Msgs < cfg.cycles {
		r.Note = fmt.Sprintf("stopped by -cycle-time at %d of %d; ", r.Msgs, cfg.cycles) + r.Note
	}
	return nil
}
