package main

import (
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// latency publishes rate messages a second for duration, each stamped
// with its send time, and measures publish-to-delivery at the subscriber.
func (p *pair) latency() (latencyResult, error) {
	count := max(1, int(float64(p.cfg.rate)*p.cfg.duration.Seconds()))
	subject := p.prefix + ".latency"
	var mu sync.Mutex
	lat := make([]time.Duration, 0, count)
	var got arrivals
	s, err := p.subscribe(subject, func(m *nats.Msg) {
		d := time.Since(p.base) - p.sentAt(m.Data)
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
		got.n.Add(1)
	})
	if err != nil {
		return latencyResult{}, err
	}
	defer s.Unsubscribe()
	inbox, r, ready, err := p.replies(func(*nats.Msg) {})
	if err != nil {
		return latencyResult{}, err
	}
	defer r.Unsubscribe()
	if err := p.waitRoutes(subject, inbox, ready); err != nil {
		return latencyResult{}, err
	}
	payload := make([]byte, p.cfg.size)
	interval := time.Second / time.Duration(p.cfg.rate)
	start, stop := time.Now(), time.Now().Add(p.cfg.duration+p.cfg.timeout)
	sent := 0
	for ; sent < count && time.Now().Before(stop); sent++ {
		if wait := time.Until(start.Add(time.Duration(sent) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		p.stamp(payload, sent)
		if err := p.pub.Publish(subject, payload); err != nil {
			return latencyResult{}, err
		}
	}
	if err := p.pub.FlushTimeout(p.cfg.timeout); err != nil {
		return latencyResult{}, err
	}
	got.wait(sent, p.cfg.timeout)
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	return latencyResult{
		Sent: sent, Received: len(lat),
		P50: percentile(lat, 0.50), P99: percentile(lat, 0.99), P999: percentile(lat, 0.999),
	}, nil
}

// qos0 publishes msgs messages as fast as the connection takes them and
// counts what arrives: core NATS, at most once, like MQTT QoS 0.
func (p *pair) qos0() (flowResult, error) {
	subject := p.prefix + ".qos0"
	var got arrivals
	s, err := p.subscribe(subject, func(*nats.Msg) {
		got.last.Store(int64(time.Since(p.base)))
		got.n.Add(1)
	})
	if err != nil {
		return flowResult{}, err
	}
	defer s.Unsubscribe()
	inbox, r, ready, err := p.replies(func(*nats.Msg) {})
	if err != nil {
		return flowResult{}, err
	}
	defer r.Unsubscribe()
	if err := p.waitRoutes(subject, inbox, ready); err != nil {
		return flowResult{}, err
	}
	payload := make([]byte, p.cfg.size)
	start := time.Since(p.base)
	stop := time.Now().Add(p.cfg.timeout)
	sent := 0
	for ; sent < p.cfg.msgs && (sent%1024 != 0 || time.Now().Before(stop)); sent++ {
		p.stamp(payload, sent)
		if err := p.pub.Publish(subject, payload); err != nil {
			return flowResult{}, err
		}
	}
	if err := p.pub.FlushTimeout(p.cfg.timeout); err != nil {
		return flowResult{}, err
	}
	got.wait(sent, p.cfg.timeout)
	return flowResult{Sent: sent, Arrived: int(got.n.Load()), Elapsed: time.Duration(got.last.Load()) - start}, nil
}

// qos1 keeps window messages unacknowledged: the subscriber answers each
// on the publisher's reply subject, and a message is counted when its
// answer is back, like a PUBACK.
func (p *pair) qos1() (flowResult, error) {
	subject := p.prefix + ".qos1"
	s, err := p.subscribe(subject, func(m *nats.Msg) { _ = m.Respond(m.Data[:8]) })
	if err != nil {
		return flowResult{}, err
	}
	defer s.Unsubscribe()
	credit := make(chan struct{}, p.cfg.window)
	var acked arrivals
	inbox, r, ready, err := p.replies(func(*nats.Msg) {
		acked.last.Store(int64(time.Since(p.base)))
		acked.n.Add(1)
		<-credit
	})
	if err != nil {
		return flowResult{}, err
	}
	defer r.Unsubscribe()
	if err := p.waitRoutes(subject, inbox, ready); err != nil {
		return flowResult{}, err
	}
	payload := make([]byte, p.cfg.size)
	start := time.Since(p.base)
	stop := time.NewTimer(p.cfg.timeout)
	defer stop.Stop()
	sent := 0
send:
	for ; sent < p.cfg.msgs; sent++ {
		select {
		case credit <- struct{}{}:
		case <-stop.C:
			break send
		}
		p.stamp(payload, sent)
		if err := p.pub.PublishMsg(&nats.Msg{Subject: subject, Reply: inbox, Data: payload}); err != nil {
			return flowResult{}, err
		}
	}
	if err := p.pub.FlushTimeout(p.cfg.timeout); err != nil {
		return flowResult{}, err
	}
	acked.wait(sent, p.cfg.timeout)
	return flowResult{Sent: sent, Arrived: int(acked.n.Load()), Elapsed: time.Duration(acked.last.Load()) - start}, nil
}
