package crash

import (
	"fmt"
	"maps"
	"slices"
	"syscall"
	"testing"
	"time"

	"mqttd/packets"
)

// shortExpiry is the Message Expiry Interval, in seconds, of the retained
// message that must be gone after the restart.
const shortExpiry = 2

// TestRetainedAndSessionsSurvive stops the broker with SIGKILL or SIGTERM
// and checks, after a restart on the same data directory, that retained
// messages are still there, that a retained message whose expiry passed
// while the broker was down and one that was cleared do not come back,
// and that a persistent session comes back with its subscription and the
// message queued for it.
func TestRetainedAndSessionsSurvive(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{{"SIGKILL", syscall.SIGKILL}, {"SIGTERM", syscall.SIGTERM}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			retainedAndSessions(t, tc.name, tc.sig)
		})
	}
}

// retainedAndSessions is one case of TestRetainedAndSessionsSurvive; name
// is how the messages call sig.
func retainedAndSessions(t *testing.T, name string, sig syscall.Signal) {
	dataDir := t.TempDir()
	b := startBroker(t, dataDir)
	expired := keepSome(t, b.addr)

	// Before the stop every retained message is there, the short-lived
	// one included: what the restart must keep and drop is known.
	want := map[string]string{"ret/q1": "r-q1", "ret/q2": "r-q2", "ret/long": "r-long", "ret/short": "r-short"}
	if got := retained(t, b.addr); !maps.Equal(got, want) {
		t.Fatalf("retained before the stop: %v, want %v", got, want)
	}

	b.stop(t, sig)
	// The expiry elapsing while the broker is down is what is tested:
	// this timer is that interval passing, not a wait for an event.
	down := time.NewTimer(time.Until(expired))
	<-down.C
	b = startBroker(t, dataDir)

	delete(want, "ret/short")
	if got := retained(t, b.addr); !maps.Equal(got, want) {
		t.Errorf("retained after %s and restart: %v, want %v", name, got, want)
	}

	keeper, present := dialPresent(t, b.addr, packets.V311, "keeper", false)
	defer keeper.close(false)
	if !present {
		t.Errorf("after %s the broker forgot keeper's session (session present 0)", name)
	}
	pub := mustDial(t, b.addr, packets.V311, "ret-pub2", true)
	defer pub.close(true)
	if err := pub.publishSync(&packets.Publish{QoS: 1, Topic: "keep/2", PacketID: 1, Payload: []byte("k2")}); err != nil {
		t.Fatal(err)
	}
	got := collect(keeper, 2)
	if !slices.Equal(got, []string{"keep/1=k1", "keep/2=k2"}) {
		t.Errorf("keeper after %s and restart got %v, want the queued keep/1 and, through the kept subscription, keep/2", name, got)
	}
}

// keepSome gives the broker at addr state to keep: retained messages at
// QoS 1 and 2, one with a long expiry, one with a short one (published
// last; it returns when that one will have expired), one set and
// cleared; and the persistent session of "keeper", subscribed to keep/#
// and offline, with one message queued for it.
func keepSome(t *testing.T, addr string) (expired time.Time) {
	t.Helper()
	pub := mustDial(t, addr, packets.V5, "ret-pub", true)
	defer pub.close(true)
	publish := func(p *packets.Publish) {
		t.Helper()
		if err := pub.publishSync(p); err != nil {
			t.Fatal(err)
		}
	}
	retain := func(topic, body string, qos byte, expiry uint32) {
		t.Helper()
		p := &packets.Publish{QoS: qos, Retain: true, Topic: topic, PacketID: 1, Payload: []byte(body)}
		if expiry > 0 {
			p.Properties.MessageExpiry = expiry
			p.Properties.Set(packets.PropMessageExpiry)
		}
		publish(p)
	}
	keeper := mustDial(t, addr, packets.V311, "keeper", false)
	if err := keeper.subscribe(1, "keep/#", 1); err != nil {
		t.Fatal(err)
	}
	keeper.close(true)
	publish(&packets.Publish{QoS: 1, Topic: "keep/1", PacketID: 2, Payload: []byte("k1")})

	retain("ret/q1", "r-q1", 1, 0)
	retain("ret/q2", "r-q2", 2, 0)
	retain("ret/long", "r-long", 1, 3600)
	retain("ret/gone", "r-gone", 1, 0)
	retain("ret/gone", "", 1, 0) // an empty retained message clears the topic
	retain("ret/short", "r-short", 1, shortExpiry)
	return time.Now().Add(shortExpiry*time.Second + 200*time.Millisecond)
}

// mustDial connects a client or fails the test.
func mustDial(t *testing.T, addr string, v packets.Version, id string, clean bool) *conn {
	t.Helper()
	c, _ := dialPresent(t, addr, v, id, clean)
	return c
}

// dialPresent connects a client and returns CONNACK's session present.
func dialPresent(t *testing.T, addr string, v packets.Version, id string, clean bool) (*conn, bool) {
	t.Helper()
	c, present, err := dial(addr, v, connectPacket(v, id, clean))
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	return c, present
}

// retained returns the retained messages under ret/, topic to payload.
// It subscribes with a clean session, then publishes a sentinel through the
// same subscription: the broker sends the retained messages of a
// subscription before anything published after it, so once the sentinel
// is back every retained message has arrived.
func retained(t *testing.T, addr string) map[string]string {
	t.Helper()
	c := mustDial(t, addr, packets.V311, "ret-reader", true)
	defer c.close(true)
	if err := c.subscribe(1, "ret/#", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.send(&packets.Publish{QoS: 1, Topic: "ret/sentinel", PacketID: 2, Payload: []byte("end")}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for range 1000 {
		pk, err := c.next(ioTimeout)
		if err != nil {
			t.Fatalf("reading retained messages (have %v): %v", got, err)
		}
		p, ok := pk.(*packets.Publish)
		if !ok {
			continue // the sentinel's PUBACK
		}
		if p.QoS > 0 {
			if err := c.send(&packets.Puback{PacketID: p.PacketID}); err != nil {
				t.Fatal(err)
			}
		}
		if p.Topic == "ret/sentinel" {
			return got
		}
		if p.Retain {
			got[p.Topic] = string(p.Payload)
		}
	}
	t.Fatalf("no sentinel among 1000 packets (have %v)", got)
	return nil
}

// collect returns the first n messages c receives, as topic=payload,
// acknowledging them, or fewer when none comes for ioTimeout.
func collect(c *conn, n int) []string {
	var got []string
	for i := 0; len(got) < n && i < 1000; i++ {
		pk, err := c.next(ioTimeout)
		if err != nil {
			return append(got, fmt.Sprintf("(%v)", err))
		}
		if p, ok := pk.(*packets.Publish); ok {
			got = append(got, p.Topic+"="+string(p.Payload))
			if p.QoS == 1 {
				c.send(&packets.Puback{PacketID: p.PacketID})
			}
		}
	}
	return got
}
