package mqttd_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"mqttd"
	"mqttd/listeners"
	"mqttd/packets"
	"mqttd/packets/packettest"
)

// TestSpec runs one subtest per row of docs/spec-checklist.md that
// concerns the broker, over real sockets. Each row replays the row's
// invalid fixtures from packettest (see runInvalidFixture) and then the
// row's broker-level checks from specRows.
// TestSpec runs every row against both readers of the engine: the
// poller's, which serves plain sockets, and the goroutine per connection
// that serves any other net.Conn (TLS, WebSocket).
func TestSpec(t *testing.T) {
	t.Parallel()
	bothReaders(t, testSpecRows)
}

func testSpecRows(t *testing.T, on ...serverOption) {
	fixtures := map[int][]packettest.Fixture{}
	for _, f := range packettest.Invalid {
		row := fixtureRow(t, f.Name)
		fixtures[row] = append(fixtures[row], f)
	}
	for row := 1; row <= 55; row++ {
		fx, extra := fixtures[row], specRows[row]
		if len(fx) == 0 && extra == nil {
			continue
		}
		t.Run(fmt.Sprintf("row%02d", row), func(t *testing.T) {
			for _, f := range fx {
				t.Run(f.Name, func(t *testing.T) { runInvalidFixture(t, f, on...) })
			}
			if extra != nil {
				extra(t, on...)
			}
		})
	}
}

// specRows holds the broker-level checks of each row, beyond its fixtures.
var specRows = map[int]func(*testing.T, ...serverOption){
	2:  specRow02SecondConnect,
	9:  specRow09PasswordWithoutUsername,
	11: specRow11EmptyClientID,
	12: specRow12ClientIDTooLong,
	15: specRow15BOMKept,
	16: specRow16ControlCharacters,
	19: specRow19LengthThenSilence,
	22: specRow22ServerOnlyPackets,
	29: specRow29TopicAlias,
	30: specRow30UnknownAliasEmptyTopic,
	33: specRow33ReceiveMaximum,
	34: specRow34SubscriptionIDFromClient,
	37: specRow37PayloadFormat,
	41: specRow41BadFilters,
	42: specRow42SharedSubscriptions,
	44: specRow44Pubrel31Dup,
	45: specRow45PubrelUnknownID,
	46: specRow46QoS2Duplicate,
	49: specRow49SessionExpiryOnDisconnect,
	50: specRow50Auth,
	51: specRow51KeepAlive,
	52: specRow52Takeover,
	53: specRow53Will,
	54: specRow54SysTopics,
	55: specRow55ManyLevels,
}

// fixtureRow reads the checklist row from a fixture name "rowNN-...".
func fixtureRow(t *testing.T, name string) int {
	t.Helper()
	num, _, _ := strings.Cut(strings.TrimPrefix(name, "row"), "-")
	row, err := strconv.Atoi(num)
	if err != nil || !strings.HasPrefix(name, "row") {
		t.Fatalf("fixture %q does not name its checklist row", name)
	}
	return row
}

// validFixture returns the valid packettest fixture called name.
func validFixture(t *testing.T, name string) packettest.Fixture {
	t.Helper()
	for _, f := range packettest.Valid {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("no valid fixture %q", name)
	return packettest.Fixture{}
}

// runInvalidFixture sends one invalid frame and checks the answer the
// checklist names. A CONNECT (or any first packet) is sent on a fresh
// connection; anything else after a good CONNECT (see expectRejected).
func runInvalidFixture(t *testing.T, f packettest.Fixture, on ...serverOption) {
	t.Helper()
	_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxPacketSize: f.MaxSize}}, on...)
	if f.Version == 0 || packets.Type(f.Raw[0]>>4) == packets.TypeConnect {
		rc := dialRaw(t, addr)
		rc.v = max(f.Version, packets.V311)
		rc.write(f.Raw)
		expectConnectRefused(rc, f)
		return
	}
	// A tiny packet-size limit leaves no room for a will in the CONNECT.
	if f.MaxSize > 0 && f.MaxSize < 64 {
		rc := connectAs(t, addr, f.Version, &packets.Connect{ClientID: "c", CleanStart: true})
		rc.write(f.Raw)
		expectServerClose(rc, f.Err)
		return
	}
	expectRejected(t, addr, f.Version, f.Raw, f.Err)
}

// expectRejected connects in version v with a will, sends raw, and checks
// that the server closes the connection (5.0: after DISCONNECT with code)
// and publishes the will: a connection the server ends for a bad packet
// ends abnormally.
func expectRejected(t *testing.T, addr string, v packets.Version, raw []byte, code packets.ReasonCode) {
	t.Helper()
	watcher := watchTopic(t, addr, "will")
	cp := &packets.Connect{ClientID: "c", CleanStart: true}
	setWill(cp, "will")
	rc := connectAs(t, addr, v, cp)
	rc.write(raw)
	expectServerClose(rc, code)
	expectPublish(watcher, "will")
}

// expectConnectRefused checks the answer to a bad first packet: nothing
// before CONNECT [MQTT-3.1.0-1]; for a bad protocol name at most a
// refusing CONNACK; for an unsupported level CONNACK 0x01 or 0x84
// [MQTT-3.1.2-2]; otherwise nothing in 3.x and a CONNACK with the
// fixture's reason code in 5.0.
func expectConnectRefused(rc *rawConn, f packettest.Fixture) {
	rc.t.Helper()
	refuse := packets.ConnRefusedProtocolVersion
	if rc.v == packets.V5 {
		refuse = packets.UnsupportedProtocolVersion
	}
	switch {
	case f.Version == 0:
	case fixtureRow(rc.t, f.Name) == 3:
		// [MQTT-3.1.2-1]: the server MAY close without a CONNACK.
		if p, err := rc.tryRead(); err == nil {
			expectConnack(rc, p, refuse)
		}
	case f.Err == packets.UnsupportedProtocolVersion:
		expectConnack(rc, rc.read(), refuse)
	case rc.v == packets.V5:
		expectConnack(rc, rc.read(), f.Err)
	}
	rc.expectClosed()
}

func expectConnack(rc *rawConn, p packets.Packet, code packets.ReasonCode) {
	rc.t.Helper()
	ack, ok := p.(*packets.Connack)
	if !ok || ack.ReasonCode != code {
		rc.t.Fatalf("got %T %+v, want CONNACK 0x%02X", p, p, byte(code))
	}
}

// TestSpecOverTransports runs the spec checklist's rows over TLS and
// WebSocket: the rows' plain TCP clients are relayed through a client of
// the transport, so the broker reads them from a real TLS or WebSocket
// connection.
func TestSpecOverTransports(t *testing.T) {
	t.Parallel()
	cert, key := writeServerCert(t)
	tlsClient := &tls.Config{RootCAs: certPool(t, cert)}
	for _, typ := range []string{listeners.TLS, listeners.WS} {
		t.Run(typ, func(t *testing.T) {
			testSpecRows(t, wrapListener(func(plain net.Listener) net.Listener {
				return newRelayListener(t, plain, listeners.Config{Type: typ, Address: "127.0.0.1:0",
					TLS: listeners.TLSConfig{CertFile: cert, KeyFile: key}}, tlsClient)
			}))
		})
	}
}
