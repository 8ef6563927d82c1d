package crash

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"mqttd/packets"
)

// TestLongKeysSurviveSIGKILL checks that a retained QoS 1 message on a
// 20,000-byte topic and a persistent session's subscription to a
// 20,000-byte filter, both acknowledged, are there after SIGKILL and a
// restart: longer than a bbolt key may hold whole, they once were
// acknowledged and kept in memory only.
func TestLongKeysSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	// Filters this long are past limits.max_filter_length's default.
	config := filepath.Join(t.TempDir(), "mqttd.yaml")
	if err := os.WriteFile(config, []byte("limits:\n  max_filter_length: 65535\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, dataDir, "--config", config)
	topic := "ret/" + strings.Repeat("t", 20000-len("ret/"))
	filter := "long/" + strings.Repeat("f", 20000-len("long/"))

	keeper := mustDial(t, b.addr, packets.V311, "long-keeper", false)
	if err := keeper.subscribe(1, filter, 1); err != nil {
		t.Fatal(err)
	}
	keeper.close(true)
	pub := mustDial(t, b.addr, packets.V311, "long-pub", true)
	if err := pub.publishSync(&packets.Publish{QoS: 1, Retain: true, Topic: topic, PacketID: 1, Payload: []byte("r")}); err != nil {
		t.Fatal(err)
	}
	pub.close(true)
	b.stop(t, syscall.SIGKILL)

	b = startBroker(t, dataDir, "--config", config)
	if got := retained(t, b.addr); len(got) != 1 || got[topic] != "r" {
		t.Errorf("after SIGKILL and restart %d retained messages, the long topic's %q; want it alone, \"r\"", len(got), got[topic])
	}
	keeper, present := dialPresent(t, b.addr, packets.V311, "long-keeper", false)
	defer keeper.close(false)
	if !present {
		t.Fatal("after SIGKILL the broker forgot long-keeper's session")
	}
	pub = mustDial(t, b.addr, packets.V311, "long-pub", true)
	defer pub.close(true)
	if err := pub.publishSync(&packets.Publish{QoS: 1, Topic: filter, PacketID: 2, Payload: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	if got := collect(keeper, 1); len(got) != 1 || got[0] != filter+"=k" {
		t.Errorf("long-keeper got %.80q, want the message through its long subscription", got)
	}
}
