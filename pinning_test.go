package mqttd_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// bulkyProps are 5.0 properties of about 240 KB: four user properties at
// the string length limit.
func bulkyProps() packets.Properties {
	var p packets.Properties
	for i := range 4 {
		p.User = append(p.User, packets.UserProperty{Key: fmt.Sprint(i), Value: strings.Repeat("v", 60000)})
	}
	p.Set(packets.PropUserProperty)
	return p
}

// TestKeptValuesDoNotPinFrames checks that what the broker keeps past a
// packet is copied out of its frame, so that a small kept value never
// holds a large frame alive: a short filter from a SUBSCRIBE with bulky
// properties, the client id and user name from a bulky CONNECT kept for
// the connection's life, and the topic levels of a retained message
// later replaced by a small one. Pinned, the 60 frames here would hold
// about 14 MB; copied, the broker keeps a few KB per client.
func TestKeptValuesDoNotPinFrames(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	const n = 20
	before := heapInUse()
	var keep []*rawConn
	for i := range n {
		cp := &packets.Connect{ClientID: fmt.Sprintf("pin-%d", i), Username: "user", CleanStart: true,
			Properties: bulkyProps()}
		rc := connectAs(t, addr, packets.V5, cp)
		sub := &packets.Subscribe{PacketID: 1, Properties: bulkyProps(),
			Subscriptions: []packets.Subscription{{Filter: fmt.Sprintf("f/%d", i)}}}
		rc.send(sub)
		rc.read()
		topic := fmt.Sprintf("r/%d", i)
		rc.send(&packets.Publish{Topic: topic, Retain: true, Payload: bytes.Repeat([]byte("p"), 240000)})
		rc.send(&packets.Publish{Topic: topic, Retain: true, Payload: []byte("small")})
		rc.ping()
		keep = append(keep, rc)
	}
	growth := int64(heapInUse()) - int64(before)
	t.Logf("heap growth for %d clients: %d bytes", n, growth)
	if limit := int64(n * 40 << 10); growth > limit {
		t.Errorf("heap grew by %d bytes for %d clients, over %d: kept values pin their frames", growth, n, limit)
	}
	for _, rc := range keep {
		rc.ping() // every client still served
	}
}
