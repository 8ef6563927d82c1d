package mqttd_test

import (
	"testing"

	"mqttd"
	"mqttd/packets"
)

// appendPackets encodes ps one after another, as a client writing them
// in one go would.
func appendPackets(t *testing.T, v packets.Version, ps ...packets.Packet) []byte {
	t.Helper()
	var b []byte
	for _, p := range ps {
		var err error
		if b, err = p.Append(b, v); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// receiveAll reads n PUBLISHes on topic and returns their packet ids.
func receiveAll(rc *rawConn, topic string, n int) []uint16 {
	rc.t.Helper()
	ids := make([]uint16, n)
	for i := range ids {
		ids[i] = expectPublish(rc, topic).PacketID
	}
	return ids
}

// inflightOf reports the messages in flight to client id.
func inflightOf(t *testing.T, srv *mqttd.Server, id string) int {
	t.Helper()
	for _, cs := range all(srv) {
		if cs.ID == id {
			return cs.Inflight
		}
	}
	t.Fatalf("no client %q", id)
	return 0
}

// all lists every client of srv.
func all(srv *mqttd.Server) []mqttd.ClientState {
	page, _ := srv.Clients("", 1000)
	return page
}

// TestAcknowledgementsInOneWrite checks acknowledgements that arrive
// together, as a client acknowledging its window writes them: each
// completes its message or step, in order, whatever comes between them
// (one for an id not in flight, one with a reason code and properties,
// another packet, a PUBREC) and wherever the read ends, inside a frame
// included; PUBRECs and PUBRELs written together get their answers in
// order.
func TestAcknowledgementsInOneWrite(t *testing.T) {
	t.Parallel()
	for _, v := range versions {
		t.Run(versionName(v), func(t *testing.T) {
			srv, addr := startServer(t, mqttd.Options{})
			sub := connectAs(t, addr, v, &packets.Connect{ClientID: "sub", CleanStart: true})
			subscribe(sub, packets.Subscription{Filter: "t", Options: packets.SubOptions{QoS: 2}})
			pub := connectAs(t, addr, v, &packets.Connect{ClientID: "pub", CleanStart: true})
			for i := range 7 {
				pub.send(&packets.Publish{Topic: "t", QoS: 1 + byte(i/5), PacketID: uint16(i + 1), Payload: []byte("x")})
			}
			ids := receiveAll(sub, "t", 7)
			sub.send(&packets.Pubrec{PacketID: ids[5]})
			expectAck(sub, packets.TypePubrel, ids[5], packets.Success)
			if n := inflightOf(t, srv, "sub"); n != 7 {
				t.Fatalf("inflight %d before the acknowledgements, want 7", n)
			}
			third := &packets.Puback{PacketID: ids[2]}
			if v == packets.V5 {
				third.ReasonCode = packets.NoMatchingSubscribers
				third.Properties.ReasonString = "nobody listens"
				third.Properties.Set(packets.PropReasonString)
			}
			b := appendPackets(t, v,
				&packets.Puback{PacketID: ids[0]}, &packets.Puback{PacketID: ids[1]},
				&packets.Puback{PacketID: 999}, third, &packets.Pingreq{},
				&packets.Pubcomp{PacketID: ids[5]}, &packets.Pubrec{PacketID: ids[6]},
				&packets.Puback{PacketID: ids[3]}, &packets.Puback{PacketID: ids[4]})
			sub.write(b[:len(b)-2])
			if p := sub.read(); p.Type() != packets.TypePingresp {
				t.Fatalf("got %T %+v, want PINGRESP", p, p)
			}
			expectAck(sub, packets.TypePubrel, ids[6], packets.Success)
			waitFor(t, "five messages acknowledged", func() bool { return inflightOf(t, srv, "sub") == 2 })
			sub.write(b[len(b)-2:])
			waitFor(t, "the last PUBACK", func() bool { return inflightOf(t, srv, "sub") == 1 })
			sub.send(&packets.Pubcomp{PacketID: ids[6]})
			waitFor(t, "all acknowledged", func() bool { return inflightOf(t, srv, "sub") == 0 })
			expectNothing(sub)

			for id := uint16(1); id <= 5; id++ {
				expectAck(pub, packets.TypePuback, id, packets.Success)
			}
			expectAck(pub, packets.TypePubrec, 6, packets.Success)
			expectAck(pub, packets.TypePubrec, 7, packets.Success)
			pub.write(appendPackets(t, v, &packets.Pubrel{PacketID: 6}, &packets.Pubrel{PacketID: 7}, &packets.Pubrel{PacketID: 42}))
			unknown := packets.Success
			if v == packets.V5 {
				unknown = packets.PacketIDNotFound
			}
			expectAck(pub, packets.TypePubcomp, 6, packets.Success)
			expectAck(pub, packets.TypePubcomp, 7, packets.Success)
			expectAck(pub, packets.TypePubcomp, 42, unknown)
			expectNothing(pub)
		})
	}
}

// TestWrongAcknowledgementAmongOthers checks that acknowledgements
// written together stop at one of the wrong kind: those before it
// complete their messages, the connection is closed for it, and those
// after it are not read, so their messages are sent again to the
// session's next connection.
func TestWrongAcknowledgementAmongOthers(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{})
	cp := func() *packets.Connect { return &packets.Connect{ClientID: "sub", KeepAlive: 60} }
	sub := connectAs(t, addr, packets.V311, cp())
	subscribe(sub, packets.Subscription{Filter: "t", Options: packets.SubOptions{QoS: 1}})
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	for i := range 3 {
		pub.send(&packets.Publish{Topic: "t", QoS: 1, PacketID: uint16(i + 1), Payload: []byte{byte('a' + i)}})
	}
	ids := receiveAll(sub, "t", 3)
	sub.write(appendPackets(t, packets.V311,
		&packets.Puback{PacketID: ids[0]}, &packets.Pubcomp{PacketID: ids[1]}, &packets.Puback{PacketID: ids[2]}))
	sub.expectClosed()
	if n := srv.Stats().Disconnects["protocol_error"]; n != 1 {
		t.Errorf("disconnects[protocol_error] = %d, want 1", n)
	}
	waitFor(t, "the session offline", func() bool {
		for _, cs := range all(srv) {
			if cs.ID == "sub" {
				return !cs.Connected
			}
		}
		return false
	})
	again := connectAs(t, addr, packets.V311, cp())
	for _, want := range []string{"b", "c"} {
		p := expectPublish(again, "t")
		if string(p.Payload) != want || !p.Dup {
			t.Fatalf("sent again %q (dup %v), want %q with DUP", p.Payload, p.Dup, want)
		}
	}
	expectNothing(again)
}

// TestAcknowledgementRunRefillsWindow checks that a window acknowledged
// in one write is refilled from the session's queue.
func TestAcknowledgementRunRefillsWindow(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxInflight: 2}})
	sub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "sub", CleanStart: true})
	subscribe(sub, packets.Subscription{Filter: "t", Options: packets.SubOptions{QoS: 1}})
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	for i := range 6 {
		pub.send(&packets.Publish{Topic: "t", QoS: 1, PacketID: uint16(i + 1), Payload: []byte{byte('a' + i)}})
	}
	for want := byte('a'); want < 'g'; want += 2 {
		var ps [2]*packets.Publish
		for i := range ps {
			if ps[i] = expectPublish(sub, "t"); ps[i].Payload[0] != want+byte(i) {
				t.Fatalf("got %q, want %q", ps[i].Payload, []byte{want + byte(i)})
			}
		}
		sub.write(appendPackets(t, packets.V311, &packets.Puback{PacketID: ps[0].PacketID}, &packets.Puback{PacketID: ps[1].PacketID}))
	}
	expectNothing(sub)
	waitFor(t, "all acknowledged", func() bool { return inflightOf(t, srv, "sub") == 0 })
}

// TestRefusedQoS2IDIsNew checks [MQTT-4.3.3-9]: after a PUBREC of 0x80 or
// above the client's next PUBLISH with that packet id is a new message,
// routed, not taken for a resend of the refused one.
func TestRefusedQoS2IDIsNew(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	sub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "sub", CleanStart: true})
	subscribe(sub, packets.Subscription{Filter: "a"})
	pub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "$SYS/x", QoS: 2, PacketID: 7, Payload: []byte("refused")})
	if rec, ok := pub.read().(*packets.Pubrec); !ok || rec.ReasonCode < 0x80 {
		t.Fatalf("got %+v, want a refusing PUBREC", rec)
	}
	pub.send(&packets.Publish{Topic: "a", QoS: 2, PacketID: 7, Payload: []byte("new message")})
	if rec, ok := pub.read().(*packets.Pubrec); !ok || rec.ReasonCode != 0 {
		t.Fatalf("got %+v, want PUBREC 0", rec)
	}
	pub.send(&packets.Pubrel{PacketID: 7})
	pub.read() // PUBCOMP
	expectPublish(sub, "a")
}

// TestWrongAcknowledgement checks that an acknowledgement of the wrong
// kind for the flow of the message in flight is a protocol error (§4.3):
// the connection is closed, 5.0 with DISCONNECT 0x82 first. One for a
// packet id not in flight is ignored: it may be late, from before a
// reconnect.
func TestWrongAcknowledgement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		qos  byte
		ack  func(id uint16) packets.Packet
	}{
		{"PUBACK for QoS 2", 2, func(id uint16) packets.Packet { return &packets.Puback{PacketID: id} }},
		{"PUBREC for QoS 1", 1, func(id uint16) packets.Packet { return &packets.Pubrec{PacketID: id} }},
		{"PUBCOMP for QoS 1", 1, func(id uint16) packets.Packet { return &packets.Pubcomp{PacketID: id} }},
		{"PUBCOMP before PUBREC", 2, func(id uint16) packets.Packet { return &packets.Pubcomp{PacketID: id} }},
	} {
		for _, v := range versions {
			t.Run(tc.name+"-"+versionName(v), func(t *testing.T) {
				srv, addr := startServer(t, mqttd.Options{})
				sub := connectAs(t, addr, v, &packets.Connect{ClientID: "sub", CleanStart: true})
				subscribe(sub, packets.Subscription{Filter: "t", Options: packets.SubOptions{QoS: 2}})
				pub := connectAs(t, addr, v, &packets.Connect{ClientID: "pub", CleanStart: true})
				pub.send(&packets.Publish{Topic: "t", QoS: tc.qos, PacketID: 1, Payload: []byte("x")})
				p := expectPublish(sub, "t")
				// Not in flight: ignored, but for 5.0's PUBREL 0x92 to a PUBREC.
				sub.send(tc.ack(p.PacketID + 1))
				for _, got := range sub.ping() {
					if rel, ok := got.(*packets.Pubrel); !ok || rel.ReasonCode != packets.PacketIDNotFound {
						t.Fatalf("an acknowledgement for an id not in flight got %T %+v", got, got)
					}
				}
				sub.send(tc.ack(p.PacketID))
				if v == packets.V5 {
					if d, ok := sub.read().(*packets.Disconnect); !ok || d.ReasonCode != packets.ProtocolError {
						t.Fatalf("got %+v, want DISCONNECT 0x82", d)
					}
				}
				sub.expectClosed()
				if n := srv.Stats().Disconnects["protocol_error"]; n != 1 {
					t.Errorf("disconnects[protocol_error] = %d, want 1", n)
				}
			})
		}
	}
}
