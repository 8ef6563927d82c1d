package mqttd_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mqttd"
	"mqttd/packets"
)

// TestReady checks what Ready says: not ready before Serve; ready while
// every listener accepts and the store takes writes; not ready, saying
// why, once a commit failed, and ready again by itself once the store
// takes writes again, with no client traffic to show it (the probe,
// which leaves nothing stored); not ready once a listener stopped,
// naming it, and while shutting down.
func TestReady(t *testing.T) {
	t.Parallel()
	g := newGatedStore()
	srv, err := mqttd.New(mqttd.Options{Store: g})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Ready(); err == nil || !strings.Contains(err.Error(), "not serving yet") {
		t.Errorf("before Serve: Ready() = %v, want not serving yet", err)
	}
	var ls []net.Listener
	for _, name := range []string{"a", "b"} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.AddListener(name, l); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	shutdown := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}
	t.Cleanup(shutdown)
	waitFor(t, "Ready() == nil once serving", func() bool { return srv.Ready() == nil })
	addr := ls[0].Addr().String()

	keep := connectRaw(t, addr, &packets.Connect{ClientID: "keep"}) // a persistent session: stored
	g.failWith(errors.New("disk on fire"))
	if codes := subscribe(keep, packets.Subscription{Filter: "k/#", Options: qos(1)}); codes[0] != packets.SubackFailure {
		t.Fatalf("SUBACK %#x while the store fails, want 0x80", byte(codes[0]))
	}
	err = srv.Ready()
	if err == nil || !strings.Contains(err.Error(), "store: commits have failed") || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("after a failed commit: Ready() = %v, want the store's error", err)
	}
	applies := g.appliesSoFar()
	waitFor(t, "Ready to probe the store", func() bool {
		srv.Ready()
		return g.appliesSoFar() > applies
	})
	if srv.Ready() == nil {
		t.Fatal("ready after a probe of a store that still fails")
	}
	g.failWith(nil)
	waitFor(t, "a probe to find the store writable again", func() bool { return srv.Ready() == nil })
	snap, err := g.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, ss := range snap.Sessions {
		if ss.Session.ID != "keep" {
			t.Errorf("the store keeps session %q; only keep was stored", ss.Session.ID)
		}
	}

	ls[1].Close()
	waitFor(t, "Ready to see listener b stopped", func() bool {
		err := srv.Ready()
		return err != nil && strings.Contains(err.Error(), "listener b stopped")
	})
	if err := srv.Ready(); strings.Contains(err.Error(), "listener a") {
		t.Errorf("Ready() = %v: listener a still accepts", err)
	}
	shutdown()
	if err := srv.Ready(); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("after Shutdown: Ready() = %v, want shutting down", err)
	}
	if err := <-served; !errors.Is(err, mqttd.ErrServerClosed) {
		t.Errorf("Serve returned %v", err)
	}
}

// churn connects and disconnects clients with new ids until stop is
// closed (or 100,000 times), as a busy broker sees them come and go,
// counting them in n. It reports its first error on the returned channel
// when done.
func churn(addr string, stop <-chan struct{}, n *atomic.Int64) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			for i := 0; i < 100_000; i++ {
				n.Add(1)
				select {
				case <-stop:
					return nil
				default:
				}
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					return err
				}
				b, _ := (&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: fmt.Sprintf("m-%d", i),
					CleanStart: i%2 == 0}).Append(nil, packets.V311)
				nc.SetDeadline(time.Now().Add(10 * time.Second))
				_, err = nc.Write(b)
				if err == nil {
					_, err = packets.ReadPacket(bufio.NewReader(nc), packets.V311, 0)
				}
				nc.Close()
				if err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	return done
}

// TestClientsPages pages through the sessions while clients come and go:
// the ids come in increasing order, every page holds at most the limit,
// and each session there throughout, online or not, is listed exactly
// once.
func TestClientsPages(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{})
	var stable []string
	for i := range 30 {
		id := fmt.Sprintf("s-%02d", i)
		stable = append(stable, id)
		c := connectRaw(t, addr, &packets.Connect{ClientID: id, CleanStart: i%3 == 0})
		if i%3 == 1 {
			c.send(&packets.Disconnect{})
			c.expectClosed() // kept offline
		}
	}
	stop := make(chan struct{})
	var churned atomic.Int64
	done := churn(addr, stop, &churned)
	waitFor(t, "clients to come and go", func() bool { return churned.Load() > 20 })
	for _, limit := range []int{1, 4, 7, 1000} {
		seen := map[string]int{}
		after, pages := "", 0
		for {
			if pages++; pages > 100_000 {
				t.Fatalf("limit %d: no last page", limit)
			}
			page, next := srv.Clients(after, limit)
			if len(page) > limit {
				t.Fatalf("limit %d: a page of %d", limit, len(page))
			}
			for _, c := range page {
				if c.ID <= after {
					t.Fatalf("limit %d: %q listed after %q", limit, c.ID, after)
				}
				seen[c.ID]++
				after = c.ID
			}
			if next == "" {
				break
			}
			after = next
		}
		for _, id := range stable {
			if seen[id] != 1 {
				t.Errorf("limit %d: %s listed %d times, want once", limit, id, seen[id])
			}
		}
		if pages < (len(stable)+limit-1)/limit {
			t.Errorf("limit %d: %d pages for at least %d sessions", limit, pages, len(stable))
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestSubscriptionsListed checks a session's subscriptions with their
// options, in the order of their filters and paged.
func TestSubscriptionsListed(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{})
	v5 := connectRaw(t, addr, expiringConnect5("v5", 600))
	sub := &packets.Subscribe{PacketID: 1, Subscriptions: []packets.Subscription{
		{Filter: "b/+", Options: packets.SubOptions{QoS: 2, RetainAsPublished: true, RetainHandling: 2}},
		{Filter: "a/#", Options: packets.SubOptions{QoS: 1, NoLocal: true}},
		{Filter: "$share/g/c", Options: packets.SubOptions{QoS: 0}},
	}}
	sub.Properties.SubscriptionIDs = []uint32{7}
	sub.Properties.Set(packets.PropSubscriptionID)
	v5.send(sub)
	if ack, ok := v5.read().(*packets.Suback); !ok || !slices.Equal(ack.ReasonCodes, []packets.ReasonCode{2, 1, 0}) {
		t.Fatalf("SUBACK %+v", ack)
	}
	all, next, ok := srv.Subscriptions("v5", "", 0)
	want := []mqttd.SubscriptionState{
		{Filter: "$share/g/c", ID: 7},
		{Filter: "a/#", QoS: 1, NoLocal: true, ID: 7},
		{Filter: "b/+", QoS: 2, RetainAsPublished: true, RetainHandling: 2, ID: 7},
	}
	if !ok || next != "" || !slices.Equal(all, want) {
		t.Errorf("Subscriptions(v5) = %+v, %q, %v\nwant %+v", all, next, ok, want)
	}
	page, next, _ := srv.Subscriptions("v5", "", 2)
	if !slices.Equal(page, want[:2]) || next != "a/#" {
		t.Errorf("first page %+v, next %q", page, next)
	}
	page, next, _ = srv.Subscriptions("v5", next, 2)
	if !slices.Equal(page, want[2:]) || next != "" {
		t.Errorf("second page %+v, next %q", page, next)
	}
	if _, _, ok := srv.Subscriptions("nobody", "", 0); ok {
		t.Error("subscriptions of a client id the broker does not hold")
	}
}

func expiringConnect5(id string, expiry uint32) *packets.Connect {
	cp := expiringConnect(id, expiry)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", packets.V5
	return cp
}

// TestRetainedTopicsListed checks the retained listing: every topic, $
// ones too, in order and paged, with its QoS and payload size, the
// payload's start only when asked for; not a cleared topic, nor one
// whose message expired.
func TestRetainedTopicsListed(t *testing.T) {
	t.Parallel()
	srv, _ := startServer(t, mqttd.Options{})
	big := bytes.Repeat([]byte("x"), 2000)
	var soon packets.Properties
	soon.MessageExpiry = 1
	soon.Set(packets.PropMessageExpiry)
	for _, m := range []struct {
		topic   string
		payload []byte
		qos     byte
		props   *packets.Properties
	}{
		{"a/2", big, 0, nil}, {"a/1", []byte("hello"), 1, nil}, {"$app/state", []byte("up"), 2, nil},
		{"gone", []byte("x"), 0, nil}, {"gone", nil, 0, nil}, {"brief", []byte("x"), 1, &soon},
	} {
		if err := srv.Publish(m.topic, m.payload, m.qos, true, m.props); err != nil {
			t.Fatal(err)
		}
	}
	all, next := srv.RetainedTopics("", 0, 0)
	if got := topicsOf(all); !slices.Equal(got, []string{"$app/state", "a/1", "a/2", "brief"}) || next != "" {
		t.Fatalf("RetainedTopics = %q, next %q", got, next)
	}
	if a2 := all[2]; a2.QoS != 0 || a2.PayloadSize != 2000 || a2.Payload != nil || !a2.ExpiresAt.IsZero() {
		t.Errorf("a/2: %+v", a2)
	}
	if b := all[3]; b.QoS != 1 || b.ExpiresAt.IsZero() {
		t.Errorf("brief: %+v, want its expiry", b)
	}
	page, next := srv.RetainedTopics("", 2, 16)
	if got := topicsOf(page); !slices.Equal(got, []string{"$app/state", "a/1"}) || next != "a/1" {
		t.Errorf("first page %q, next %q", got, next)
	}
	if string(page[1].Payload) != "hello" {
		t.Errorf("a/1 payload %q", page[1].Payload)
	}
	page, next = srv.RetainedTopics(next, 2, 16)
	if got := topicsOf(page); !slices.Equal(got, []string{"a/2", "brief"}) || next != "" {
		t.Errorf("second page %q, next %q", got, next)
	}
	if p := page[0]; p.PayloadSize != 2000 || !bytes.Equal(p.Payload, big[:16]) {
		t.Errorf("a/2 with a 16-byte payload cap: size %d, payload %q", p.PayloadSize, p.Payload)
	}
	waitFor(t, "the expired message to leave the listing", func() bool {
		all, _ := srv.RetainedTopics("", 0, 0)
		return !slices.Contains(topicsOf(all), "brief")
	})
}

func topicsOf(rs []mqttd.RetainedState) []string {
	var ts []string
	for _, r := range rs {
		ts = append(ts, r.Topic)
	}
	return ts
}
