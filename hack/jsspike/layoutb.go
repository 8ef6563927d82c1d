package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// consumerResult is layout B at one replica count: what the durable
// consumers cost to make, to hold and to acknowledge through.
type consumerResult struct {
	Replicas   int
	Created    int
	Create     row
	RSSBefore  int64
	RSSAfter   int64
	IdleCPU    float64 // share of a core, consumers idle
	Acks       row
	DeleteTime time.Duration
}

// measureConsumers is layout B, as NATS's MQTT layer keeps a session's
// QoS 1 subscription: a durable consumer with a filter of its own on a
// shared stream (mqtt.go makes them push consumers with Replicas 0,
// which a durable takes as the stream's: R3 on three nodes; this spike
// uses pull consumers so that it can acknowledge one at a time).
// It makes cfg.consumers of them (at most cfg.consumerTime), reads the
// process's memory before and after and its CPU while they are idle,
// puts one message for each of up to cfg.acks sessions and acknowledges
// each through its consumer (double ack: confirmed by the consumer's
// replicas), and times deleting the stream with them.
func measureConsumers(ctx context.Context, cfg config, js jetstream.JetStream, replicas int, say func(string)) (consumerResult, error) {
	res := consumerResult{Replicas: replicas}
	name := "B" + strconv.Itoa(replicas)
	// nats-server 2.15 caps a stream at 1,000 consumers unless the
	// stream or the account says otherwise (JSDefaultMaxConsumersPerStream;
	// -1 counts as not set): NATS's MQTT layer's $MQTT_msgs stream sets
	// nothing, so it meets that cap at its 1,001st durable.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage, Replicas: 3,
		MaxConsumers: cfg.consumers,
	}); err != nil {
		return res, err
	}
	var err error
	if res.RSSBefore, _, err = procStat(); err != nil {
		return res, err
	}
	var handles []jetstream.Consumer
	res.Create, handles = createConsumers(ctx, cfg, js, name, replicas)
	res.Created = len(handles)
	if res.Created == 0 {
		js.DeleteStream(ctx, name)
		return res, fmt.Errorf("no consumer made: %s", res.Create.Note)
	}
	if res.RSSAfter, _, err = procStat(); err != nil {
		return res, err
	}
	say(fmt.Sprintf("3: %d consumers made, idle", res.Created))
	if res.IdleCPU, err = idleCPU(cfg.idle); err != nil {
		return res, err
	}
	say("3: acknowledging through them")
	res.Acks, err = ackThrough(ctx, cfg, js, name, handles[:min(cfg.acks, res.Created)])
	if err != nil {
		return res, err
	}
	say("3: deleting the stream")
	res.DeleteTime, err = deleteStream(ctx, cfg, js, name)
	return res, err
}

// deleteStream deletes a stream and waits until it is gone (its delete
// request may time out while the servers tear down its consumers), at
// most cfg.phaseTime.
func deleteStream(ctx context.Context, cfg config, js jetstream.JetStream, name string) (time.Duration, error) {
	start := time.Now()
	err := js.DeleteStream(ctx, name)
	for time.Since(start) < cfg.phaseTime {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return time.Since(start), nil
		}
		_, err = js.Stream(ctx, name)
		if err == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return time.Since(start), fmt.Errorf("stream %s not gone within %v", name, cfg.phaseTime)
}

func consumerName(i int) string { return "s" + strconv.Itoa(i) }

// createConsumers makes durable consumers 0.. with 16 requests
// outstanding, until cfg.consumers, cfg.consumerTime or the first
// failure (noted in the row), and returns the first ones made in order.
func createConsumers(ctx context.Context, cfg config, js jetstream.JetStream, stream string, replicas int) (row, []jetstream.Consumer) {
	r := row{Phase: fmt.Sprintf("3B create durable consumers R%d", replicas)}
	var (
		mu      sync.Mutex
		lat     latencies
		ferr    error
		wg      sync.WaitGroup
		handles = make([]jetstream.Consumer, cfg.consumers)
	)
	next := make(chan int)
	start := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t := time.Now()
				c, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
					Durable:       consumerName(i),
					FilterSubject: stream + ".c1." + clientID(i) + ".>",
					AckPolicy:     jetstream.AckExplicitPolicy,
					DeliverPolicy: jetstream.DeliverNewPolicy,
					AckWait:       30 * time.Second,
					MaxAckPending: 1024,
					Replicas:      replicas,
				})
				mu.Lock()
				if err != nil && ferr == nil {
					ferr = fmt.Errorf("consumer %d: %w", i, err)
				}
				if err == nil {
					lat = append(lat, time.Since(t))
					handles[i] = c
				}
				mu.Unlock()
			}
		}()
	}
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ferr != nil
	}
	for i := 0; i < cfg.consumers && time.Since(start) < cfg.consumerTime && !failed(); i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	r.Elapsed = time.Since(start)
	r.Msgs, r.Commits = len(lat), len(lat)
	r.P50, r.P99 = lat.pct(0.5), lat.pct(0.99)
	r.Note = "latency per consumer"
	switch {
	case ferr != nil:
		r.Note += fmt.Sprintf("; stopped at %d of %d: %v", len(lat), cfg.consumers, ferr)
	case len(lat) < cfg.consumers:
		r.Note += fmt.Sprintf("; stopped by -consumer-time at %d of %d", len(lat), cfg.consumers)
	}
	made := 0
	for made < len(handles) && handles[made] != nil {
		made++
	}
	return r, handles[:made]
}

// ackThrough puts one message for each session of a consumer in cons,
// then fetches each through its consumer and acknowledges it, 16 at a
// time.
func ackThrough(ctx context.Context, cfg config, js jetstream.JetStream, stream string, cons []jetstream.Consumer) (row, error) {
	n := len(cons)
	r := row{Phase: "3B fetch + double ack through own consumer"}
	data := payload(cfg.size)
	for i := range n {
		if _, err := js.PublishAsync(stream+".c1."+clientID(i)+".m", data); err != nil {
			return r, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(cfg.timeout):
		return r, errors.New("publishes not acknowledged in time")
	}
	var (
		mu   sync.Mutex
		lat  latencies
		ferr error
		wg   sync.WaitGroup
	)
	next := make(chan int)
	start := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t := time.Now()
				err := fetchAck(ctx, cfg, cons[i])
				mu.Lock()
				if err != nil && ferr == nil {
					ferr = fmt.Errorf("session %d: %w", i, err)
				}
				if err == nil {
					lat = append(lat, time.Since(t))
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n && time.Since(start) < cfg.phaseTime; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	r.Elapsed = time.Since(start)
	r.Msgs, r.Commits = len(lat), len(lat)
	r.P50, r.P99 = lat.pct(0.5), lat.pct(0.99)
	r.Note = "latency per fetch+ack"
	if len(lat) < n {
		r.Note += fmt.Sprintf("; stopped by -phase-time at %d of %d", len(lat), n)
	}
	return r, ferr
}

func fetchAck(ctx context.Context, cfg config, cons jetstream.Consumer) error {
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(cfg.timeout))
	if err != nil {
		return err
	}
	got := 0
	for m := range batch.Messages() {
		got++
		if err := m.DoubleAck(ctx); err != nil {
			return err
		}
	}
	if err := batch.Error(); err != nil {
		return err
	}
	if got != 1 {
		return fmt.Errorf("fetched %d messages, want 1", got)
	}
	return nil
}
