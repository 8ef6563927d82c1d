package mqttd_test

import (
	"fmt"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestReceiveMaximumAfterReconnect checks that a 5.0 client is never sent
// more unacknowledged QoS 1/2 messages than its Receive Maximum, also when
// it comes back to its session with a lower one: the messages in flight
// are sent again two at a time, one more for each acknowledgement
// [MQTT-3.3.4-9].
func TestReceiveMaximumAfterReconnect(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	connect := func(receiveMax uint16, clean bool) *rawConn {
		props := sessionExpiryProps(3600)
		props.ReceiveMaximum = receiveMax
		props.Set(packets.PropReceiveMaximum)
		return connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "rm", CleanStart: clean, Properties: props})
	}
	first := connect(10, true)
	subscribe(first, packets.Subscription{Filter: "rm", Options: packets.SubOptions{QoS: 1}})
	pub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "pub", CleanStart: true})
	for i := range 12 {
		pub.send(&packets.Publish{Topic: "rm", QoS: 1, PacketID: uint16(i + 1), Payload: []byte(fmt.Sprint(i))})
		pub.read()
	}
	if got := first.ping(); len(got) != 10 {
		t.Fatalf("%d messages before any acknowledgement, want the Receive Maximum of 10", len(got))
	}
	dropAndWait(t, srv, first)

	back := connect(2, false)
	got := back.ping()
	if len(got) != 2 {
		t.Fatalf("%d messages sent again, want the new Receive Maximum of 2", len(got))
	}
	for _, p := range got {
		if pub, ok := p.(*packets.Publish); !ok || !pub.Dup {
			t.Fatalf("got %+v, want a PUBLISH sent again with DUP", p)
		}
	}
	received := len(got)
	for len(got) > 0 {
		back.send(&packets.Puback{PacketID: got[0].(*packets.Publish).PacketID})
		more := back.ping()
		received += len(more)
		if got = append(got[1:], more...); len(got) > 2 {
			t.Fatalf("%d messages unacknowledged, past the Receive Maximum of 2", len(got))
		}
	}
	if received != 12 {
		t.Errorf("%d messages received in all, want 12", received)
	}
}
