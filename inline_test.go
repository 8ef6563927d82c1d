package mqttd_test

import (
	"sync"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// inbox collects what an inline subscription receives.
type inbox struct {
	mu   sync.Mutex
	msgs []mqttd.Message
}

func (in *inbox) handle(m mqttd.Message) {
	in.mu.Lock()
	in.msgs = append(in.msgs, m)
	in.mu.Unlock()
}

func (in *inbox) snapshot() []mqttd.Message {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]mqttd.Message(nil), in.msgs...)
}

// TestInlinePublishSubscribe checks the inline client API goes through
// the same routing as a network client: an inline subscriber gets the
// retained messages first, then what clients and Publish send; Publish
// reaches a 5.0 network subscriber at the granted QoS with its
// properties, and sets retained messages; unsubscribing stops delivery.
func TestInlinePublishSubscribe(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{})
	if err := srv.Publish("sensors/old", []byte("kept"), 0, true, nil); err != nil {
		t.Fatal(err)
	}
	in := &inbox{}
	unsubscribe, err := srv.Subscribe("sensors/+", in.handle)
	if err != nil {
		t.Fatal(err)
	}
	if got := in.snapshot(); len(got) != 1 || got[0].Topic != "sensors/old" || !got[0].Retain || string(got[0].Payload) != "kept" {
		t.Fatalf("on Subscribe: %+v, want the retained sensors/old", got)
	}

	sub := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "net", CleanStart: true})
	subscribe(sub, packets.Subscription{Filter: "sensors/#", Options: packets.SubOptions{QoS: 1}})
	if p := expectPublish(sub, "sensors/old"); !p.Retain {
		t.Error("the retained message set by Publish reached the network subscriber without the retain flag")
	}
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	pub.send(&packets.Publish{Topic: "sensors/net", Payload: []byte("from a client")})
	pub.ping()
	expectPublish(sub, "sensors/net")

	props := &packets.Properties{User: []packets.UserProperty{{Key: "k", Value: "v"}}}
	props.Set(packets.PropUserProperty)
	if err := srv.Publish("sensors/inline", []byte("from the API"), 1, false, props); err != nil {
		t.Fatal(err)
	}
	props.User[0].Value = "changed after Publish"
	p := expectPublish(sub, "sensors/inline")
	if p.QoS != 1 || len(p.Properties.User) != 1 || p.Properties.User[0].Value != "v" {
		t.Errorf("network subscriber got QoS %d, user properties %+v; want QoS 1 and k=v", p.QoS, p.Properties.User)
	}
	sub.send(&packets.Puback{PacketID: p.PacketID})

	waitFor(t, "both messages at the inline subscriber", func() bool { return len(in.snapshot()) == 3 })
	got := in.snapshot()
	if got[1].Topic != "sensors/net" || got[2].Topic != "sensors/inline" || got[2].QoS != 1 || got[2].Retain {
		t.Errorf("inline subscriber got %+v", got[1:])
	}

	unsubscribe()
	unsubscribe() // idempotent
	if err := srv.Publish("sensors/late", nil, 0, false, nil); err != nil {
		t.Fatal(err)
	}
	expectPublish(sub, "sensors/late")
	if n := len(in.snapshot()); n != 3 {
		t.Errorf("%d messages after unsubscribing, want 3", n)
	}
	if s := srv.Stats().Subscriptions; s != 1 {
		t.Errorf("Stats.Subscriptions = %d after the inline unsubscribe, want 1", s)
	}

	for _, bad := range []string{"", "a/+", "a/#"} {
		if err := srv.Publish(bad, nil, 0, false, nil); err == nil {
			t.Errorf("Publish to %q: no error", bad)
		}
	}
	if err := srv.Publish("a", nil, 3, false, nil); err == nil {
		t.Error("Publish at QoS 3: no error")
	}
	if _, err := srv.Subscribe("a/#/b", in.handle); err == nil {
		t.Error("Subscribe to a/#/b: no error")
	}
}
