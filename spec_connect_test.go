package mqttd_test

import (
	"testing"
	"time"

	"mqttd"
	"mqttd/packets"
)

// Row 2: a second CONNECT is a protocol error [MQTT-3.1.0-2].
func specRow02SecondConnect(t *testing.T, on ...serverOption) {
	for _, v := range versions {
		t.Run(versionName(v), func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{}, on...)
			second := &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: v, ClientID: "c", CleanStart: true}
			expectRejected(t, addr, v, encode(t, second, v), packets.ProtocolError)
		})
	}
}

// Row 9: 5.0 allows a password without a user name (§3.1.2.9); the 3.1.1
// case is the row's fixture.
func specRow09PasswordWithoutUsername(t *testing.T, on ...serverOption) {
	t.Run("v5-accepted", func(t *testing.T) {
		_, addr := startServer(t, mqttd.Options{}, on...)
		rc := dialRaw(t, addr)
		rc.v = packets.V5
		rc.write(validFixture(t, "row09-v5-connect-password-only").Raw)
		expectConnack(rc, rc.read(), packets.Success)
		expectNothing(rc)
	})
}

// Row 11: an empty client id needs a clean session in 3.1.1
// [MQTT-3.1.3-8]; 5.0 assigns one whatever Clean Start says
// [MQTT-3.1.3-6/-7].
func specRow11EmptyClientID(t *testing.T, on ...serverOption) {
	t.Run("v311-persistent-refused", func(t *testing.T) {
		_, addr := startServer(t, mqttd.Options{}, on...)
		rc, ack := connectReply(t, addr, packets.V311, &packets.Connect{})
		if ack.ReasonCode != packets.ConnRefusedIdentifier {
			t.Fatalf("CONNACK 0x%02X, want 0x02", byte(ack.ReasonCode))
		}
		rc.expectClosed()
	})
	for _, clean := range []bool{false, true} {
		name := "v5-persistent-assigned"
		if clean {
			name = "v5-clean-assigned"
		}
		t.Run(name, func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{}, on...)
			rc, ack := connectReply(t, addr, packets.V5, &packets.Connect{CleanStart: clean})
			if ack.ReasonCode != packets.Success || !ack.Properties.Has(packets.PropAssignedClientID) || ack.Properties.AssignedClientID == "" {
				t.Fatalf("CONNACK %+v, want success with an Assigned Client Identifier", ack)
			}
			expectNothing(rc)
		})
	}
}

// Row 12: a client id over the configured limit is refused: 3.1.1
// CONNACK 0x02 [MQTT-3.1.3-9], 5.0 CONNACK 0x85 [MQTT-3.1.3-8].
func specRow12ClientIDTooLong(t *testing.T, on ...serverOption) {
	want := map[packets.Version]packets.ReasonCode{
		packets.V311: packets.ConnRefusedIdentifier,
		packets.V5:   packets.ClientIDNotValid,
	}
	for _, v := range versions {
		t.Run(versionName(v), func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxClientIDLength: 8}}, on...)
			connectAs(t, addr, v, &packets.Connect{ClientID: "12345678", CleanStart: true}).ping()
			rc, ack := connectReply(t, addr, v, &packets.Connect{ClientID: "123456789", CleanStart: true})
			if ack.ReasonCode != want[v] {
				t.Fatalf("CONNACK 0x%02X, want 0x%02X", byte(ack.ReasonCode), byte(want[v]))
			}
			rc.expectClosed()
		})
	}
}

// Row 19: a remaining length larger than what is sent, then silence
// (CVE-2017-7651): the keepalive, or before CONNECT the connect timeout,
// ends the connection; the will of a connected client is published.
func specRow19LengthThenSilence(t *testing.T, on ...serverOption) {
	partial := []byte{
		0x30, 0x64, // fixed header: PUBLISH, QoS 0, remaining length 100
		0x00, 0x01, 't', // topic "t"
		'x', 'y', // 2 bytes of payload; the other 95 never come
	}
	for _, v := range versions {
		t.Run(versionName(v)+"-keepalive", func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{}, on...)
			watcher := watchTopic(t, addr, "will")
			cp := &packets.Connect{ClientID: "c", CleanStart: true, KeepAlive: 1}
			setWill(cp, "will")
			rc := connectAs(t, addr, v, cp)
			rc.write(partial)
			rc.expectClosed()
			expectPublish(watcher, "will")
		})
	}
	t.Run("before-connect", func(t *testing.T) {
		_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{ConnectTimeout: time.Second}}, on...)
		rc := dialRaw(t, addr)
		rc.write([]byte{
			0x10, 0x64, // fixed header: CONNECT, remaining length 100
			0x00, 0x04, 'M', 'Q', // the start of the protocol name, then silence
		})
		rc.expectClosed()
	})
}

// Row 22: packets only a server sends are a protocol error from a client
// (CVE-2021-28166).
func specRow22ServerOnlyPackets(t *testing.T, on ...serverOption) {
	for _, v := range versions {
		for _, p := range []packets.Packet{
			&packets.Connack{},
			&packets.Suback{PacketID: 1, ReasonCodes: []packets.ReasonCode{0}},
			&packets.Unsuback{PacketID: 1, ReasonCodes: unsubackCodes(v)},
			&packets.Pingresp{},
		} {
			t.Run(versionName(v)+"-"+p.Type().String(), func(t *testing.T) {
				_, addr := startServer(t, mqttd.Options{}, on...)
				expectRejected(t, addr, v, encode(t, p, v), packets.ProtocolError)
			})
		}
	}
}

// unsubackCodes is what an UNSUBACK for one filter carries: a code in 5.0
// only.
func unsubackCodes(v packets.Version) []packets.ReasonCode {
	if v == packets.V5 {
		return []packets.ReasonCode{packets.Success}
	}
	return nil
}

// Row 49: DISCONNECT must not set a Session Expiry Interval when CONNECT
// had none (§3.14.2.2.2); the protocol error makes the close abnormal.
func specRow49SessionExpiryOnDisconnect(t *testing.T, on ...serverOption) {
	t.Run("v5", func(t *testing.T) {
		_, addr := startServer(t, mqttd.Options{}, on...)
		d := &packets.Disconnect{Properties: packets.Properties{SessionExpiry: 10}}
		d.Properties.Set(packets.PropSessionExpiry)
		expectRejected(t, addr, packets.V5, encode(t, d, packets.V5), packets.ProtocolError)
	})
}

// Row 50: enhanced authentication is not supported: AUTH is a protocol
// error without an Authentication Method in CONNECT [MQTT-4.12.0-7], and
// a CONNECT naming a method is refused with 0x8C [MQTT-4.12.0-1].
func specRow50Auth(t *testing.T, on ...serverOption) {
	t.Run("v5-auth-without-method", func(t *testing.T) {
		_, addr := startServer(t, mqttd.Options{}, on...)
		expectRejected(t, addr, packets.V5, encode(t, &packets.Auth{}, packets.V5), packets.ProtocolError)
	})
	t.Run("v5-unknown-method", func(t *testing.T) {
		_, addr := startServer(t, mqttd.Options{}, on...)
		cp := &packets.Connect{ClientID: "c", CleanStart: true}
		cp.Properties.AuthMethod = "SCRAM-SHA-1"
		cp.Properties.Set(packets.PropAuthMethod)
		rc, ack := connectReply(t, addr, packets.V5, cp)
		if ack.ReasonCode != packets.BadAuthenticationMethod {
			t.Fatalf("CONNACK 0x%02X, want 0x8C", byte(ack.ReasonCode))
		}
		rc.expectClosed()
	})
}

// TestConnackLargerThanClientMaximum: a 5.0 client whose Maximum Packet
// Size no CONNACK fits is closed without one [MQTT-3.1.2-24] (Mosquitto's
// 12-prop-maximum-packet-size-connect).
func TestConnackLargerThanClientMaximum(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	rc := dialRaw(t, addr)
	rc.v = packets.V5
	cp := &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: "tiny", CleanStart: true}
	cp.Properties.MaximumPacketSize = 2
	cp.Properties.Set(packets.PropMaximumPacketSize)
	rc.send(cp)
	p, err := rc.tryRead()
	if err == nil {
		t.Fatalf("got %T %+v, want the connection closed without a CONNACK", p, p)
	}
	if isTimeoutErr(err) {
		t.Fatal("connection still open")
	}
}
