package mqttd_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestFullDisk runs the store on a small tmpfs and fills it: a message a
// persistent session must keep is then refused (5.0 PUBACK 0x97), while
// clean sessions go on being served, and Ready says the store fails;
// once space is freed, Ready finds out by itself (its probe commits), and
// messages are stored and acknowledged again.
func TestFullDisk(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=2m"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	b := startBroker(t, mqttd.Options{DataDir: dir})
	keep := connectSubscribed(t, &packets.Connect{ClientID: "keep"}, b.addr, packets.Subscription{Filter: "keep/#", Options: qos(1)})
	keep.send(&packets.Disconnect{})
	keep.expectClosed()
	clean := connectSubscribed(t, &packets.Connect{ClientID: "clean", CleanStart: true}, b.addr, packets.Subscription{Filter: "free/#", Options: qos(1)})
	pub := connectRaw(t, b.addr, &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: "pub", CleanStart: true})

	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{1}, 64<<10)
	for i := 0; i < 64; i++ { // 4 MiB at most, twice the disk
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()

	payload := bytes.Repeat([]byte{2}, 32<<10)
	refused := false
	for id := uint16(1); id <= 64 && !refused; id++ {
		pub.send(&packets.Publish{QoS: 1, PacketID: id, Topic: "keep/x", Payload: payload})
		ack, ok := pub.read().(*packets.Puback)
		if !ok || ack.PacketID != id {
			t.Fatalf("got %+v, want PUBACK %d", ack, id)
		}
		switch ack.ReasonCode {
		case packets.Success:
		case packets.QuotaExceeded:
			refused = true
		default:
			t.Fatalf("PUBACK %#x, want 0 or 0x97 (disk full)", ack.ReasonCode)
		}
	}
	if !refused {
		t.Fatal("no message refused on a full disk")
	}
	if err := b.srv.Ready(); err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("on a full disk: Ready() = %v, want the store's ENOSPC", err)
	}
	pub.send(&packets.Publish{QoS: 1, PacketID: 100, Topic: "free/x", Payload: []byte("no store needed")})
	if ack, ok := pub.read().(*packets.Puback); !ok || ack.ReasonCode != packets.Success {
		t.Errorf("a message for a clean session on a full disk: %+v, want PUBACK 0", ack)
	}
	if p, ok := clean.read().(*packets.Publish); !ok || p.Topic != "free/x" {
		t.Errorf("clean subscriber got %+v", p)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// With no traffic: a broker taken out of service gets none.
	waitFor(t, "Ready() == nil once space is freed", func() bool { return b.srv.Ready() == nil })
	pub.send(&packets.Publish{QoS: 1, PacketID: 101, Topic: "keep/y", Payload: []byte("room again")})
	if ack, ok := pub.read().(*packets.Puback); !ok || ack.ReasonCode != packets.Success {
		t.Errorf("once space is freed: %+v, want PUBACK 0", ack)
	}
	if st := b.srv.Stats(); st.StoreErrors == 0 || st.StoreRefused == 0 {
		t.Errorf("store errors %d, refused %d: want them counted", st.StoreErrors, st.StoreRefused)
	}
}
