package mqttd_test

import (
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestMQTT31Connect checks MQTT 3.1's own CONNECT rules: a client id of
// zero length is refused with CONNACK 2 (3.1 knows no assigned ids), and
// the CONNACK's session-present bit, reserved in 3.1, is never set, even
// when a session is resumed.
func TestMQTT31Connect(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{})
	for _, clean := range []bool{true, false} {
		rc, ack := connect31(t, addr, &packets.Connect{ClientID: "", CleanStart: clean})
		if ack.ReasonCode != packets.ConnRefusedIdentifier {
			t.Errorf("empty client id, clean %v: CONNACK %#x, want 2", clean, ack.ReasonCode)
		}
		rc.expectClosed()
	}
	first, ack := connect31(t, addr, &packets.Connect{ClientID: "old-device", CleanStart: false})
	if ack.ReasonCode != 0 || ack.SessionPresent {
		t.Fatalf("CONNACK %+v", ack)
	}
	first.send(&packets.Disconnect{})
	first.expectClosed()
	_, ack = connect31(t, addr, &packets.Connect{ClientID: "old-device", CleanStart: false})
	if ack.ReasonCode != 0 || ack.SessionPresent {
		t.Errorf("resumed 3.1 session: CONNACK %+v, want the session-present bit clear", ack)
	}
}

// TestUnknownProtocolLevel checks that a CONNECT with a known protocol
// name and a level the broker does not speak under it is answered with
// CONNACK "unacceptable protocol version" before the close, not silence:
// 0x01 in the 3.x form, 0x84 in the 5.0 form for levels above 4 [MQTT-3.1.2-2].
// MQTT.js asked for version 3 sends "MQTT" with level 3.
func TestUnknownProtocolLevel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		level byte
		want  packets.ReasonCode
		v     packets.Version // the CONNACK's form
	}{
		{"MQTT", 3, packets.ConnRefusedProtocolVersion, packets.V311},
		{"MQTT", 2, packets.ConnRefusedProtocolVersion, packets.V311},
		{"MQIsdp", 4, packets.ConnRefusedProtocolVersion, packets.V311},
		{"MQTT", 6, packets.UnsupportedProtocolVersion, packets.V5},
		{"MQIsdp", 5, packets.UnsupportedProtocolVersion, packets.V5},
	} {
		t.Run(tc.name+"-"+string('0'+rune(tc.level)), func(t *testing.T) {
			_, addr := startServer(t, mqttd.Options{})
			rc := dialRaw(t, addr)
			body := append([]byte{0, byte(len(tc.name))}, tc.name...)
			body = append(body, tc.level, 0x02, 0, 60) // clean session, keepalive 60
			if tc.level >= 5 {
				body = append(body, 0) // no properties
			}
			body = append(body, 0, 1, 'c') // client id "c"
			rc.write(append([]byte{0x10, byte(len(body))}, body...))
			rc.v = tc.v
			if ack, ok := rc.read().(*packets.Connack); !ok || ack.ReasonCode != tc.want {
				t.Fatalf("got %+v, want CONNACK %#x", ack, tc.want)
			}
			rc.expectClosed()
		})
	}
}

// TestResponseInformation checks Request Response Information: a client
// asking for it is given the configured prefix with its client id in
// CONNACK; one not asking, or a broker configured with "-", gives none.
func TestResponseInformation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		configured string
		ask        bool
		want       string
	}{
		{"", true, "responses/ri/"},
		{"", false, ""},
		{"reply/to/", true, "reply/to/ri/"},
		{"-", true, ""},
	} {
		_, addr := startServer(t, mqttd.Options{Protocol: mqttd.Protocol{ResponseInformation: tc.configured}})
		cp := &packets.Connect{ClientID: "ri", CleanStart: true}
		if tc.ask {
			cp.Properties.RequestResponseInfo = 1
			cp.Properties.Set(packets.PropRequestResponseInfo)
		}
		_, ack := connectReply(t, addr, packets.V5, cp)
		if got := ack.Properties.ResponseInfo; got != tc.want || ack.Properties.Has(packets.PropResponseInfo) != (tc.want != "") {
			t.Errorf("configured %q, asked %v: Response Information %q, want %q", tc.configured, tc.ask, got, tc.want)
		}
	}
}

// TestServerRedirect checks a configured Server Reference: every client is
// refused at CONNECT, a 5.0 one with 0x9C (or 0x9D for a permanent move)
// and the reference, a 3.1.1 one with CONNACK 3.
func TestServerRedirect(t *testing.T) {
	t.Parallel()
	for _, moved := range []bool{false, true} {
		srv, addr := startServer(t, mqttd.Options{Protocol: mqttd.Protocol{ServerReference: "127.0.0.1:1884", ServerMoved: moved}})
		rc, ack := connectReply(t, addr, packets.V5, &packets.Connect{ClientID: "r", CleanStart: true})
		want := packets.UseAnotherServer
		if moved {
			want = packets.ServerMoved
		}
		if ack.ReasonCode != want || ack.Properties.ServerReference != "127.0.0.1:1884" {
			t.Errorf("moved %v: CONNACK %+v, want %#x with the Server Reference", moved, ack, want)
		}
		rc.expectClosed()
		old, ack := connectReply(t, addr, packets.V311, &packets.Connect{ClientID: "r", CleanStart: true})
		if ack.ReasonCode != packets.ConnRefusedServerUnavailable {
			t.Errorf("3.1.1: CONNACK %#x, want 3", ack.ReasonCode)
		}
		old.expectClosed()
		if st := srv.Stats(); st.Sessions != 0 || st.ConnectsRefused != 2 {
			t.Errorf("%d sessions, %d refused; want 0, 2", st.Sessions, st.ConnectsRefused)
		}
	}
}
