package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// measureAcks is layout A's acknowledgement: an entry deleted once its
// PUBACK comes, four ways, each on cfg.acks entries of its own (taken
// in session order): the stream API's delete by sequence, one request
// at a time and with a window of requests outstanding; a purge of the
// entry's subject, with a window; and a tombstone (an empty message with
// a TTL on the entry's subject, which replaces it) in atomic batches.
// It returns the number of messages the stream is to hold once the
// tombstones expire, and when the last was written.
func measureAcks(ctx context.Context, cfg config, nc *nats.Conn, stream jetstream.Stream, name string, s *sessions) ([]row, uint64, time.Time, error) {
	var subj []string
	var seq []uint64
	for i := range s.subj {
		subj, seq = append(subj, s.subj[i]...), append(seq, s.seq[i]...)
	}
	n := min(cfg.acks, len(seq)/4)
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	before := info.State.Msgs
	del := func(i int) (string, any) {
		return "$JS.API.STREAM.MSG.DELETE." + name, map[string]any{"seq": seq[i], "no_erase": true}
	}
	purge := func(i int) (string, any) {
		return "$JS.API.STREAM.PURGE." + name, map[string]any{"filter": subj[i]}
	}
	var rows []row
	for k, way := range []struct {
		name   string
		window int
		req    func(int) (string, any)
	}{
		{"delete by sequence, one at a time", 1, del},
		{"delete by sequence, window 100", 100, del},
		{"purge subject, window 100", 100, purge},
	} {
		r, err := pipelined(cfg, nc, "2A ack: "+way.name, k*n, n, way.window, way.req)
		if err != nil {
			return rows, 0, time.Time{}, err
		}
		rows = append(rows, r)
	}
	r, err := tombstones(cfg, nc, subj[3*n:4*n])
	rows = append(rows, r)
	return rows, before - uint64(4*n), time.Now(), err
}

// pipelined sends n requests, from index first on, with at most window
// outstanding (window goroutines each waiting for its answer).
func pipelined(cfg config, nc *nats.Conn, phase string, first, n, window int, req func(int) (string, any)) (row, error) {
	r := row{Phase: phase}
	var (
		mu   sync.Mutex
		lat  latencies
		ferr error
		wg   sync.WaitGroup
	)
	next := make(chan int)
	for range window {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				subj, body := req(i)
				b, _ := json.Marshal(body)
				t := time.Now()
				m, err := nc.Request(subj, b, cfg.timeout)
				if err == nil {
					err = apiError(m.Data)
				}
				mu.Lock()
				if err != nil && ferr == nil {
					ferr = fmt.Errorf("%s: request %d: %w", phase, i, err)
				}
				lat = append(lat, time.Since(t))
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	for i := first; i < first+n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	r.Elapsed = time.Since(start)
	r.Msgs, r.Commits = n, n
	r.P50, r.P99 = lat.pct(0.5), lat.pct(0.99)
	r.Note = "latency per request"
	return r, ferr
}

// apiError is the error a JetStream API answer carries, if any.
func apiError(data []byte) error {
	var a struct {
		Error *struct {
			Description string `json:"description"`
			ErrCode     int    `json:"err_code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return fmt.Errorf("answer %q: %w", data, err)
	}
	if a.Error != nil {
		return fmt.Errorf("%s (%d)", a.Error.Description, a.Error.ErrCode)
	}
	return nil
}

// tombstones deletes the entries of subj by atomic batches of
// tombstones of cfg.fillBatch.
func tombstones(cfg config, nc *nats.Conn, subj []string) (row, error) {
	r := row{Phase: fmt.Sprintf("2A ack: TTL tombstones, batches of %d", cfg.fillBatch)}
	var lat latencies
	start := time.Now()
	for len(subj) > 0 {
		k := min(cfg.fillBatch, len(subj))
		batch := make([]entry, k)
		for i := range batch {
			batch[i] = entry{subject: subj[i], ttl: "1s"}
		}
		t := time.Now()
		if _, err := publishBatch(nc, batch, cfg.timeout); err != nil {
			return r, err
		}
		lat = append(lat, time.Since(t))
		r.Msgs += k
		subj = subj[k:]
	}
	r.Elapsed, r.Commits = time.Since(start), len(lat)
	r.P50, r.P99 = lat.pct(0.5), lat.pct(0.99)
	r.Note = "latency per batch"
	return r, nil
}

// waitMsgs polls until the stream holds want messages.
func waitMsgs(ctx context.Context, stream jetstream.Stream, want uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		info, err := stream.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stream %s holds %d messages after %v, want %d", info.Config.Name, info.State.Msgs, timeout, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
