package main

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// config is what one run measures; see the flags in main.go.
type config struct {
	msgs     int           // messages in each throughput phase
	rate     int           // messages per second in the latency phase
	duration time.Duration // length of the latency phase
	window   int           // unacknowledged messages in the QoS 1 analogue
	size     int           // payload bytes
	timeout  time.Duration // bound on each phase's wait for arrivals
}

// latencyResult is the publish-to-delivery latency of a paced flow.
type latencyResult struct {
	Sent, Received int
	P50, P99, P999 time.Duration
}

// flowResult is one throughput phase: messages sent and arrived (or
// acknowledged), from the first publish to the last arrival.
type flowResult struct {
	Sent, Arrived int
	Elapsed       time.Duration
}

func (f flowResult) rate() float64 {
	if f.Elapsed <= 0 {
		return 0
	}
	return float64(f.Arrived) / f.Elapsed.Seconds()
}

func (f flowResult) loss() float64 {
	if f.Sent == 0 {
		return 0
	}
	return 100 * float64(f.Sent-f.Arrived) / float64(f.Sent)
}

// placementResult is the three measurements with one placement of the
// publisher and the subscriber.
type placementResult struct {
	Name    string
	Latency latencyResult
	QoS0    flowResult
	QoS1    flowResult
}

// pair is a publisher and a subscriber connection; base is the clock the
// payloads' timestamps count from (one process, one monotonic clock).
type pair struct {
	pub, sub *nats.Conn
	prefix   string
	base     time.Time
	cfg      config
}

// probe is a payload no measured message has (they carry at least 16
// bytes): the subscriber answers it, proving that interest has crossed
// the routes both ways before anything is counted.
var probe = []byte{0}

// subscribe serves subject on the subscriber's connection: probes are
// answered, every other message goes to handle.
func (p *pair) subscribe(subject string, handle nats.MsgHandler) (*nats.Subscription, error) {
	s, err := p.sub.Subscribe(subject, func(m *nats.Msg) {
		if len(m.Data) == len(probe) {
			_ = m.Respond(probe)
			return
		}
		handle(m)
	})
	if err != nil {
		return nil, err
	}
	return s, p.sub.Flush()
}

// replies subscribes the publisher to a fresh inbox: probe answers close
// ready, every other message goes to handle. A probe published before
// the subscriber's interest reached its server is answered by that
// server with a "no responders" status, an empty message: not handle's,
// whose QoS 1 analogue waits for credit and would then hold up every
// probe answer behind it.
func (p *pair) replies(handle nats.MsgHandler) (string, *nats.Subscription, <-chan struct{}, error) {
	inbox := p.pub.NewInbox()
	ready := make(chan struct{})
	var once sync.Once
	s, err := p.pub.Subscribe(inbox, func(m *nats.Msg) {
		if len(m.Data) == 0 {
			return
		}
		if len(m.Data) == len(probe) {
			once.Do(func() { close(ready) })
			return
		}
		handle(m)
	})
	if err != nil {
		return "", nil, nil, err
	}
	return inbox, s, ready, p.pub.Flush()
}

// waitRoutes sends probes on subject with reply inbox until one is
// answered, within the timeout.
func (p *pair) waitRoutes(subject, inbox string, ready <-chan struct{}) error {
	deadline := time.NewTimer(p.cfg.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := p.pub.PublishMsg(&nats.Msg{Subject: subject, Reply: inbox, Data: probe}); err != nil {
			return err
		}
		select {
		case <-ready:
			return nil
		case <-deadline.C:
			return fmt.Errorf("%s: no answer to a probe within %v", subject, p.cfg.timeout)
		case <-tick.C:
		}
	}
}

// stamp writes the sequence number and the send time into a payload.
func (p *pair) stamp(payload []byte, seq int) {
	binary.LittleEndian.PutUint64(payload, uint64(seq))
	binary.LittleEndian.PutUint64(payload[8:], uint64(time.Since(p.base)))
}

// sentAt is the send time stamp wrote, on the same clock.
func (p *pair) sentAt(payload []byte) time.Duration {
	return time.Duration(binary.LittleEndian.Uint64(payload[8:]))
}

// percentile is the q-th quantile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// arrivals counts messages arrived and when the last one did.
type arrivals struct {
	n    atomic.Int64
	last atomic.Int64 // since pair.base
}

// wait returns when want messages have arrived, nothing has for a second
// (the rest is lost) or timeout has passed.
func (a *arrivals) wait(want int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	seen, quietSince := int64(-1), time.Now()
	for now := range tick.C {
		n := a.n.Load()
		if n >= int64(want) || now.After(deadline) {
			return
		}
		if n != seen {
			seen, quietSince = n, now
		} else if now.Sub(quietSince) > time.Second {
			return
		}
	}
}
