package crash

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
	"mqttd/packets"
)

// storedEntries counts the entries the replicated session store holds
// for client id (cluster "crash").
func storedEntries(t *testing.T, js jetstream.JetStream, id string) int {
	t.Helper()
	prefix := "mqttd.crash.ss.c" + base64.RawURLEncoding.EncodeToString([]byte(id)) + ".m."
	stream, err := js.Stream(context.Background(), "mqttd_crash_sessions")
	if err != nil {
		return 0
	}
	info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return 0
	}
	return len(info.State.Subjects)
}

// publishAcked publishes p on c until it is acknowledged, connecting
// again to addr when the broker closes the connection instead (a
// message it could not confirm), for up to 20 s; it returns the
// connection it ended on.
func publishAcked(t *testing.T, c *conn, addr string, p *packets.Publish) *conn {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := c.publishSync(p)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %q not acknowledged within 20 s: %v", p.Payload, err)
		}
		c.close(false)
		c = dialUntilServed(t, addr, connectPacket(packets.V311, "pub", true))
	}
}

// TestClusterReplicatedSessionsKilled: three mqttd processes keep their
// persistent sessions in the replicated store. Node 3 holds two: one
// offline with messages queued, one online with messages it has not
// acknowledged. Node 3 is killed with SIGKILL while a publisher goes
// on; the survivors take its sessions over; each client reconnects to
// another node with clean start 0 and gets every message whose PUBACK
// the publisher got (at least once), in order: those node 3 had stored
// (the unacknowledged ones again) and those published since.
func TestClusterReplicatedSessionsKilled(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	var nodes []*broker
	for i := range 3 {
		nodes = append(nodes, startNode(t, fmt.Sprintf("n%d", i+1), urls[i], "sessions: replicated"))
	}
	nc, err := nats.Connect(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	off := dialUntilServed(t, nodes[2].addr, connectPacket(packets.V311, "off", false))
	if err := off.subscribe(1, "k/#", 1); err != nil {
		t.Fatal(err)
	}
	off.close(true)
	on := dialUntilServed(t, nodes[2].addr, connectPacket(packets.V311, "on", false))
	if err := on.subscribe(1, "k/#", 1); err != nil {
		t.Fatal(err)
	}
	pub := dialUntilServed(t, nodes[0].addr, connectPacket(packets.V311, "pub", true))
	defer func() { pub.close(true) }()
	awaitRoute(t, pub, on, "k/probe")

	const n = 200
	for i := range n {
		p := &packets.Publish{Topic: "k/data", QoS: 1, PacketID: uint16(i + 1), Payload: fmt.Appendf(nil, "%d", i)}
		if err := pub.publishSync(p); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	// "on" reads what node 3 sends it (its in-flight window) and
	// acknowledges none; node 3 has stored every message for both
	// sessions before it dies.
	for i := range 100 {
		if _, err := on.next(10 * time.Second); err != nil {
			t.Fatalf("on: message %d: %v", i, err)
		}
	}
	testutil.WaitWithin(t, 20*time.Second, fmt.Sprintf("%d entries stored for each session", n), func() bool {
		return storedEntries(t, js, "off") >= n && storedEntries(t, js, "on") >= n
	})
	nodes[2].stop(t, syscall.SIGKILL)
	on.close(false)

	// The publisher goes on at once. What it sends before the survivors
	// have taken node 3's sessions over is not confirmed (node 3 does
	// not answer): its connection is closed (3.1.1), and it sends the
	// message again, until the sessions' new nodes confirm it.
	const more = 100
	for i := n; i < n+more; i++ {
		p := &packets.Publish{Topic: "k/data", QoS: 1, PacketID: uint16(i%60000 + 1000), Payload: fmt.Appendf(nil, "%d", i)}
		pub = publishAcked(t, pub, nodes[0].addr, p)
	}

	for i, id := range []string{"off", "on"} {
		c := dialUntilServed(t, nodes[i].addr, connectPacket(packets.V311, id, false))
		for want := 0; want < n+more; {
			p, err := c.next(10 * time.Second)
			if err != nil {
				t.Logf("n1:\n%s\nn2:\n%s", nodes[0].tail(), nodes[1].tail())
				t.Fatalf("%s on node %d: message %d: %v", id, i+1, want, err)
			}
			pp, ok := p.(*packets.Publish)
			if !ok {
				t.Fatalf("%s on node %d: got %s, want PUBLISH", id, i+1, p.Type())
			}
			if err := c.send(&packets.Puback{PacketID: pp.PacketID}); err != nil {
				t.Fatal(err)
			}
			if v, err := strconv.Atoi(string(pp.Payload)); string(pp.Payload) == "probe" || err == nil && v < want {
				continue // a probe, or a message again: at least once
			}
			if string(pp.Payload) != fmt.Sprint(want) {
				t.Fatalf("%s on node %d: got %q, want message %d", id, i+1, pp.Payload, want)
			}
			want++
		}
		c.close(true)
	}
}
