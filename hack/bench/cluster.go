package main

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// minPayload is the least payload of a flow's message: its first eight
// bytes carry a stamp. The probes of awaitInterest are shorter, so that
// a subscriber can tell one that arrives late from the flow's messages.
const minPayload = 8

// probeTimeout bounds awaitInterest: interest crosses a cluster in
// milliseconds, so a probe that has not arrived in this long never will.
const probeTimeout = 10 * time.Second

// probeInterval is the time between two rounds of probes.
const probeInterval = 10 * time.Millisecond

// addrList is a flag of comma-separated broker addresses (host:port).
type addrList []string

func (l *addrList) String() string { return strings.Join(*l, ",") }

func (l *addrList) Set(v string) error {
	var out addrList
	for a := range strings.SplitSeq(v, ",") {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%q: %w", a, err)
		}
		out = append(out, a)
	}
	if len(out) > 255 {
		return errors.New("more than 255 addresses")
	}
	*l = out
	return nil
}

// pidList is a flag of comma-separated process ids.
type pidList []int

func (l *pidList) String() string {
	s := make([]string, len(*l))
	for i, p := range *l {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

func (l *pidList) Set(v string) error {
	var out pidList
	for f := range strings.SplitSeq(v, ",") {
		p, err := strconv.Atoi(f)
		if err != nil || p <= 0 {
			return fmt.Errorf("%q is no process id", f)
		}
		out = append(out, p)
	}
	*l = out
	return nil
}

// pubAddr is the address publisher i dials.
func (cfg config) pubAddr(i int) string {
	if len(cfg.pubAddrs) == 0 {
		return cfg.addr
	}
	return cfg.pubAddrs[i%len(cfg.pubAddrs)]
}

// subAddr is the address subscriber i dials.
func (cfg config) subAddr(i int) string {
	if len(cfg.subAddrs) == 0 {
		return cfg.addr
	}
	return cfg.subAddrs[i%len(cfg.subAddrs)]
}

// spansNodes reports whether the publishers and the subscribers may be on
// different brokers: the nodes of a cluster, which learn of each other's
// subscriptions some time after their SUBACKs.
func (cfg config) spansNodes() bool {
	pubs, subs := cfg.pubAddrs, cfg.subAddrs
	if len(pubs) == 0 {
		pubs = addrList{cfg.addr}
	}
	if len(subs) == 0 {
		subs = addrList{cfg.addr}
	}
	return len(pubs) > 1 || len(subs) > 1 || !slices.Equal(pubs, subs)
}

// awaitInterest waits until every subscriber gets the messages published
// at every publisher's address: a cluster passes a subscription to its
// other nodes asynchronously, so a flow started at the SUBACKs would lose
// its first messages. A prober on each address publishes, at QoS 0 on the
// flow's first topic, a payload of one byte (its index, shorter than any
// flow's message) every probeInterval until each subscriber has read one
// from each prober; probes that arrive after that are not counted
// (subscriber.handle). Subscribers must not be running yet.
func awaitInterest(cfg config, fl flow, subs []*subscriber, deadline time.Time) error {
	until := time.Now().Add(probeTimeout)
	if deadline.Before(until) {
		until = deadline
	}
	n := max(len(cfg.pubAddrs), 1)
	probers := make([]*client, 0, n)
	defer func() {
		for _, c := range probers {
			c.disconnect()
		}
	}()
	id := runID()
	for i := range n {
		c, err := dial(dialOptions{addr: cfg.pubAddr(i), transport: cfg.transport, clientID: fmt.Sprintf("%s-q%d", id, i), bufSize: 512, deadline: until})
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		probers = append(probers, c)
	}
	topic := fl.topics(0)[0]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var probeErr error
	wg.Go(func() { probeErr = probe(probers, topic, stop) })
	var err error
	for _, s := range subs {
		if err = awaitProbes(s, len(probers), until, deadline); err != nil {
			break
		}
	}
	close(stop)
	wg.Wait()
	return errors.Join(err, probeErr)
}

// probe publishes probes on every prober until stop is closed.
func probe(probers []*client, topic string, stop <-chan struct{}) error {
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for {
		for i, c := range probers {
			f := appendProbe(c.w.AvailableBuffer(), topic, byte(i))
			if _, err := c.w.Write(f); err != nil {
				return fmt.Errorf("probe: %w", err)
			}
			if err := c.w.Flush(); err != nil {
				return fmt.Errorf("probe: %w", err)
			}
		}
		select {
		case <-stop:
			return nil
		case <-tick.C:
		}
	}
}

// awaitProbes reads s's connection until it has had a probe from each of
// n probers, or until; then gives it the flow's deadline back.
func awaitProbes(s *subscriber, n int, until, deadline time.Time) error {
	if err := s.c.conn.SetDeadline(until); err != nil {
		return err
	}
	seen := make([]bool, n)
	for left := n; left > 0; {
		fr, err := s.c.fr.next()
		if err != nil {
			return fmt.Errorf("subscriber %s on %s: no probe from every publisher's address (%d of %d) within %v: %w",
				s.id, s.addr, n-left, n, probeTimeout, err)
		}
		if fr.typ != typePublish {
			continue
		}
		p, err := parsePublish(fr)
		if err != nil {
			return err
		}
		if len(p.payload) == 1 && int(p.payload[0]) < n && !seen[p.payload[0]] {
			seen[p.payload[0]] = true
			left--
		}
	}
	return s.c.conn.SetDeadline(deadline)
}

// appendProbe appends a QoS 0 PUBLISH of the one-byte payload b to topic.
func appendProbe(f []byte, topic string, b byte) []byte {
	f = append(f, typePublish<<4)
	f = appendVarint(f, 2+len(topic)+1)
	f = appendString(f, topic)
	return append(f, b)
}
