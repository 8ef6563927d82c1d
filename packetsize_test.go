package mqttd_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	paho3 "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/packets"
)

// piBudget is the least default limits.max_memory, a Raspberry Pi's with
// 256 MiB or less.
const piBudget = 64 << 20

// firmwareSize is a firmware image as ESP32 devices take over MQTT.
const firmwareSize = 4_000_000

// TestMaxPacketSizeDefault checks limits.max_packet_size's default: all
// of limits.max_incoming_bytes_total, between 1 and 16 MiB.
func TestMaxPacketSizeDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limits mqttd.Limits
		want   int
	}{
		{mqttd.Limits{MaxMemory: piBudget}, 4 << 20},
		{mqttd.Limits{MaxMemory: 128 << 20}, 8 << 20},
		{mqttd.Limits{MaxMemory: 512 << 20}, 16 << 20},
		{mqttd.Limits{MaxMemory: 512 << 20, MaxIncomingBytesTotal: 6 << 20}, 6 << 20},
		{mqttd.Limits{MaxMemory: 8 << 20}, 1 << 20},
		{mqttd.Limits{MaxMemory: piBudget, MaxPacketSize: 1000}, 1000},
	} {
		got := mqttd.Options{Limits: tc.limits}.WithDefaults().Limits.MaxPacketSize
		if got != tc.want {
			t.Errorf("max_memory %d, max_incoming_bytes_total %d, max_packet_size %d: default %d, want %d",
				tc.limits.MaxMemory, tc.limits.MaxIncomingBytesTotal, tc.limits.MaxPacketSize, got, tc.want)
		}
	}
}

// TestFirmwareSizedPublish sends a 4 MB firmware image at QoS 1 through a
// broker at the defaults of the smallest memory budget, with paho (3.1.1)
// and paho.golang (5.0): the subscriber gets it whole.
func TestFirmwareSizedPublish(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxMemory: piBudget}})
	image := payloadOf(firmwareSize)

	t.Run("3.1.1", func(t *testing.T) {
		got := make(chan []byte, 1)
		sub := pahoConnect(t, addr, "fw-sub", nil)
		wait(t, sub.Subscribe("fw/311", 1, func(_ paho3.Client, m paho3.Message) { got <- m.Payload() }))
		pub := pahoConnect(t, addr, "fw-pub", nil)
		tok := pub.Publish("fw/311", 1, false, image)
		if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
		select {
		case p := <-got:
			if !bytes.Equal(p, image) {
				t.Errorf("got %d bytes, not the image of %d", len(p), len(image))
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the image did not arrive")
		}
	})
	t.Run("5.0", func(t *testing.T) {
		sub := connect5(t, addr, &paho.Connect{ClientID: "fw-sub5", CleanStart: true}, nil)
		sub.subscribe(t, "fw/5", 1)
		pub := connect5(t, addr, &paho.Connect{ClientID: "fw-pub5", CleanStart: true}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if r, err := pub.c.Publish(ctx, &paho.Publish{Topic: "fw/5", QoS: 1, Payload: image}); err != nil || r.ReasonCode != 0 {
			t.Fatalf("publish: %v %+v", err, r)
		}
		if m := sub.next(t); !bytes.Equal(m.Payload, image) {
			t.Errorf("got %d bytes, not the image of %d", len(m.Payload), len(image))
		}
	})
}

// TestPacketTooLargeLogged sends packets one byte over limits.max_packet_size:
// each connection is closed (5.0 after DISCONNECT 0x95) and counted, and
// the first refusal is logged naming the setting, the size and the client;
// the next, within 10 s, only counted.
func TestPacketTooLargeLogged(t *testing.T) {
	t.Parallel()
	logs := &logLines{}
	const max = 64 << 10
	srv, addr := startServer(t, mqttd.Options{Logger: zerolog.New(logs), Limits: mqttd.Limits{MaxPacketSize: max}})
	// A PUBLISH header that the broker refuses before the body, of max+1
	// bytes: remaining length 65533 (0xFD 0xFF 0x03), a frame of
	// 1 + 3 + 65533 = max + 1 bytes.
	header := []byte{0x30, 0xFD, 0xFF, 0x03}
	for i, v := range []packets.Version{packets.V311, packets.V5} {
		id := []string{"big-311", "big-5"}[i]
		rc := connectAs(t, addr, v, &packets.Connect{ClientID: id, CleanStart: true})
		rc.write(append(header, "some of the body"...))
		if v == packets.V5 {
			if d, ok := rc.read().(*packets.Disconnect); !ok || d.ReasonCode != packets.PacketTooLarge {
				t.Errorf("5.0: got %+v, want DISCONNECT 0x95", d)
			}
		}
		rc.expectClosed()
	}
	waitFor(t, "both refusals counted", func() bool { return srv.Stats().Disconnects["packet_too_large"] == 2 })
	lines := logs.find("packet refused: larger than limits.max_packet_size, connection closed " +
		"(logged at most every 10 s; mqttd_disconnects_total{reason=packet_too_large} counts them)")
	if len(lines) != 1 {
		t.Fatalf("%d refusal lines, want 1 (the second within 10 s is only counted): %v", len(lines), lines)
	}
	if l := lines[0]; l["client_id"] != "big-311" || l["size"] != float64(max+1) || l["max_packet_size"] != float64(max) ||
		l["level"] != "warn" || l["remote"] == nil {
		t.Errorf("refusal line %v", l)
	}
}
