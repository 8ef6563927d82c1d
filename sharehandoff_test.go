package mqttd_test

import (
	"fmt"
	"sort"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// worker connects a 3.1.1 member of share group g on jobs/#, at QoS 1.
func worker(t *testing.T, addr, id string, clean bool) *rawConn {
	t.Helper()
	rc := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: id, CleanStart: clean})
	if codes := subscribe(rc, packets.Subscription{Filter: "$share/g/jobs/#", Options: packets.SubOptions{QoS: 1}}); codes[0] != 1 {
		t.Fatalf("SUBACK %v", codes)
	}
	return rc
}

func payloads(ps []packets.Packet) []string {
	var out []string
	for _, p := range ps {
		out = append(out, string(p.(*packets.Publish).Payload))
	}
	sort.Strings(out)
	return out
}

// TestSharedHandOff checks that the messages a member of a share group had
// not acknowledged when its connection ended go to another member, for a
// clean and for a persistent member (which does not get them again when
// it comes back).
func TestSharedHandOff(t *testing.T) {
	for _, clean := range []bool{true, false} {
		t.Run(fmt.Sprintf("clean-%v", clean), func(t *testing.T) {
			srv, addr := startServer(t, mqttd.Options{})
			a := worker(t, addr, "a", clean)
			b := worker(t, addr, "b", true)
			pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
			for i := range 4 {
				pub.send(&packets.Publish{Topic: "jobs/x", QoS: 1, PacketID: uint16(i + 1), Payload: []byte(fmt.Sprint(i))})
				pub.read()
			}
			gotA, gotB := a.ping(), b.ping()
			if len(gotA) != 2 || len(gotB) != 2 {
				t.Fatalf("a got %d, b got %d; want 2 each", len(gotA), len(gotB))
			}
			dropAndWait(t, srv, a)
			handed := b.ping()
			if got, want := payloads(handed), payloads(gotA); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("b was handed %v, want a's %v", got, want)
			}
			if n := srv.Stats().SharedHandedOff; n != 2 {
				t.Errorf("%d handed off, want 2", n)
			}
			if !clean {
				back := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "a", CleanStart: false})
				expectNothing(back) // handed on, not sent again
			}

		})
	}
}

// TestSharedLastMemberKeeps checks that a persistent member with no other
// member to hand on to keeps what it had not acknowledged, and gets it
// again (DUP) when it comes back; so does a member that holds the
// message through a plain subscription of its own too.
func TestSharedLastMemberKeeps(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	solo := worker(t, addr, "solo", false)
	both := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "both", CleanStart: false})
	subscribe(both, packets.Subscription{Filter: "$share/h/mine/#", Options: packets.SubOptions{QoS: 1}},
		packets.Subscription{Filter: "mine/#", Options: packets.SubOptions{QoS: 1}})
	peer := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "peer", CleanStart: true})
	subscribe(peer, packets.Subscription{Filter: "$share/h/mine/#", Options: packets.SubOptions{QoS: 1}})
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "jobs/z", QoS: 1, PacketID: 1, Payload: []byte("z")})
	pub.read()
	pub.send(&packets.Publish{Topic: "mine/m", QoS: 1, PacketID: 2, Payload: []byte("m")})
	pub.read()
	expectPublish(solo, "jobs/z")
	expectPublish(both, "mine/m")
	dropAndWait(t, srv, solo)
	dropAndWait(t, srv, both)
	if n := srv.Stats().SharedHandedOff; n != 0 {
		t.Errorf("%d handed off, want none", n)
	}
	for _, id := range []string{"solo", "both"} {
		back := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: id, CleanStart: false})
		if p, ok := back.read().(*packets.Publish); !ok || !p.Dup {
			t.Errorf("%s: got %+v, want its message again with DUP", id, p)
		}
	}
}
