package mqttd_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"mqttd"
	"mqttd/packets"
)

// reviewer connects a paho.golang client reading the dead letters.
func reviewer(t *testing.T, addr string) *paho5 {
	t.Helper()
	r := connect5(t, addr, &paho.Connect{ClientID: "reviewer", CleanStart: true}, nil)
	r.subscribe(t, "$DLQ/#", 1)
	return r
}

// expectLetter reads the reviewer's next message, which must be the dead
// letter of a message on topic with payload, given up on for reason for
// client after deliveries sends.
func expectLetter(t *testing.T, r *paho5, reason, topic, payload, client string, deliveries int) *paho.Publish {
	t.Helper()
	m := r.next(t)
	if want := "$DLQ/" + reason + "/" + topic; m.Topic != want || string(m.Payload) != payload || m.QoS != 1 {
		t.Fatalf("letter on %s (QoS %d) carrying %q, want %s carrying %q at QoS 1", m.Topic, m.QoS, m.Payload, want, payload)
	}
	got := map[string]string{}
	for _, u := range m.Properties.User {
		got[u.Key] = u.Value
	}
	want := map[string]string{"dlq-reason": reason, "dlq-topic": topic, "dlq-client-id": client,
		"dlq-deliveries": strconv.Itoa(deliveries)}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("user property %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if at, err := time.Parse(time.RFC3339Nano, got["dlq-time"]); err != nil || time.Since(at) > time.Minute || time.Since(at) < 0 {
		t.Errorf("dlq-time %q: want the time it was set aside (%v)", got["dlq-time"], err)
	}
	if m.Properties.MessageExpiry != nil {
		t.Errorf("the letter expires (%d s): a letter is kept for a person to review", *m.Properties.MessageExpiry)
	}
	return m
}

// publish5 publishes at QoS 1 from a paho.golang client.
func publish5(t *testing.T, p *paho5, topic, payload string, props *paho.PublishProperties) {
	t.Helper()
	p.publish(t, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(payload), Properties: props})
}

// TestDeadLetterQueueFull: a message for an offline session whose queue
// is full is set aside on $DLQ/queue_full/<topic>, with why, for whom and
// when, and counted.
func TestDeadLetterQueueFull(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxQueued: 1}})
	offlineSubscriber(t, addr, "sub", "t/#")
	r := reviewer(t, addr)
	pub := connect5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	publish5(t, pub, "t/1", "first", nil)
	publish5(t, pub, "t/2", "second", &paho.PublishProperties{ContentType: "text/plain"})
	m := expectLetter(t, r, "queue_full", "t/2", "second", "sub", 0)
	if m.Properties.ContentType != "text/plain" {
		t.Errorf("content type %q: the letter keeps the message's properties", m.Properties.ContentType)
	}
	// $DLQ/ is the broker's, as $SYS/ is, with or without an ACL file.
	if r := pub.publish(t, &paho.Publish{Topic: "$DLQ/queue_full/t/2", QoS: 1, Payload: []byte("forged")}); r.ReasonCode != byte(packets.NotAuthorized) {
		t.Errorf("PUBLISH to $DLQ/: reason code %#x, want 0x87", r.ReasonCode)
	}
	// Counted once Publish returned: a subscriber may have had it before.
	waitFor(t, "the letter counted", func() bool { return srv.Stats().DeadLetters["queue_full"] > 0 })
	st := srv.Stats()
	if st.DeadLetters["queue_full"] != 1 || st.Dropped["queue_full"] != 1 {
		t.Errorf("dead letters %v, dropped %v: want one queue_full of each", st.DeadLetters, st.Dropped)
	}
	// Kept for later: a reader subscribing afterwards finds it retained.
	late := connectSubscribed(t, &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: "late", CleanStart: true},
		addr, packets.Subscription{Filter: "$DLQ/#", Options: qos(1)})
	if p := expectPublish(late, "$DLQ/queue_full/t/2"); !p.Retain || string(p.Payload) != "second" {
		t.Errorf("late reader got %+v: want the letter, retained", p)
	}
}

// TestDeadLetterExpired: a queued message whose 5.0 Message Expiry passes
// before its client comes back is set aside on $DLQ/expired/<topic>, and
// the letter itself does not expire.
func TestDeadLetterExpired(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	rc, _ := reconnect5(t, addr, "sub", 300)
	subscribe(rc, packets.Subscription{Filter: "t/#", Options: qos(1)})
	rc.send(&packets.Disconnect{})
	rc.expectClosed()
	r := reviewer(t, addr)
	pub := connect5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	expiry := uint32(1)
	publish5(t, pub, "t/e", "stale", &paho.PublishProperties{MessageExpiry: &expiry})
	expires := time.Now().Add(time.Second)
	waitFor(t, "the message's expiry to pass", func() bool { return time.Now().After(expires.Add(100 * time.Millisecond)) })
	back, present := reconnect5(t, addr, "sub", 300)
	if !present {
		t.Fatal("the session did not stay")
	}
	expectLetter(t, r, "expired", "t/e", "stale", "sub", 0)
	expectNothing(back)
}

// TestDeadLetterTooLarge: a message over the subscriber's Maximum Packet
// Size, which it may not be sent [MQTT-3.1.2-25], is set aside on
// $DLQ/too_large/<topic>.
func TestDeadLetterTooLarge(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{})
	small := connectAs(t, addr, packets.V5, limitedConnect("small", 200))
	subscribe(small, packets.Subscription{Filter: "t/#", Options: qos(1)})
	r := reviewer(t, addr)
	pub := connect5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	big := strings.Repeat("x", 500)
	publish5(t, pub, "t/big", big, nil)
	expectLetter(t, r, "too_large", "t/big", big, "small", 1)
	expectNothing(small)
}

// TestDeadLetterDeliveryLimit: a device that drops its connection each
// time a message arrives, before acknowledging it, is sent it
// max_deliveries times (10); then the message is set aside on
// $DLQ/delivery_limit/<topic> and the device gets the message that
// waited behind it.
func TestDeadLetterDeliveryLimit(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxInflight: 1}})
	dev := connectRawSession(t, addr, "device", false, false)
	subscribe(dev, packets.Subscription{Filter: "t/#", Options: qos(1)})
	r := reviewer(t, addr)
	pub := connect5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	publish5(t, pub, "t/poison", "crash", nil)
	publish5(t, pub, "t/next", "fine", nil)
	for i := 1; i <= mqttd.DefaultMaxDeliveries; i++ {
		p := expectPublish(dev, "t/poison")
		if p.Dup != (i > 1) {
			t.Fatalf("send %d: DUP %v", i, p.Dup)
		}
		dev.nc.Close()
		dev = connectRawSession(t, addr, "device", false, true)
	}
	expectLetter(t, r, "delivery_limit", "t/poison", "crash", "device", mqttd.DefaultMaxDeliveries)
	p := expectPublish(dev, "t/next")
	dev.send(&packets.Puback{PacketID: p.PacketID})
	expectNothing(dev)
}

// TestDeadLettersNeedAGrant: with an ACL file, only a user granted $DLQ/
// reads the letters (a # rule does not match it), and nobody publishes
// there.
func TestDeadLettersNeedAGrant(t *testing.T) {
	dir := t.TempDir()
	_, addr := startServer(t, mqttd.Options{
		Limits: mqttd.Limits{MaxQueued: 1},
		Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{PasswordFile: writePasswords(t, dir, "ops", "dev", "sensor"),
			ACLFile: writeFile(t, dir, "acl", "user ops\ntopic read $DLQ/#\n\nuser dev\ntopic readwrite #\n\n"+
				"user sensor\ntopic write box/#\n")}},
	})
	dev := connectAs(t, addr, packets.V5, as("dev", "dev", "pw-dev"))
	if codes := subscribe(dev, packets.Subscription{Filter: "$DLQ/#", Options: qos(1)}, packets.Subscription{Filter: "#", Options: qos(1)}); codes[0] != packets.NotAuthorized || codes[1] != 1 {
		t.Fatalf("dev's SUBACK %v: want $DLQ/# refused (0x87), # granted", codes)
	}
	if code := publishQoS1(dev, 1, "$DLQ/queue_full/forged", false); code != packets.NotAuthorized {
		t.Errorf("dev's PUBLISH to $DLQ/: code %#x, want 0x87", byte(code))
	}
	ops := connect5(t, addr, &paho.Connect{ClientID: "ops", CleanStart: true, UsernameFlag: true, Username: "ops",
		PasswordFlag: true, Password: []byte("pw-ops")}, nil)
	ops.subscribe(t, "$DLQ/#", 1)
	box := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "box", UsernameFlag: true, Username: "dev",
		PasswordFlag: true, Password: []byte("pw-dev")})
	subscribe(box, packets.Subscription{Filter: "box/#", Options: qos(1)})
	box.send(&packets.Disconnect{})
	box.expectClosed()
	sensor := connectAs(t, addr, packets.V311, as("sensor", "sensor", "pw-sensor"))
	publishQoS1(sensor, 1, "box/a", false)
	publishQoS1(sensor, 2, "box/b", false)
	expectLetter(t, ops, "queue_full", "box/b", "box/b", "box", 0)
	for _, topic := range []string{"box/a", "box/b"} {
		p := expectPublish(dev, topic)
		dev.send(&packets.Puback{PacketID: p.PacketID})
	}
	expectNothing(dev)
}

// TestDeadLettersJSON: with envelope json a letter is a JSON object that
// a 3.1.1 reader can read.
func TestDeadLettersJSON(t *testing.T) {
	_, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxQueued: 1},
		DeadLetters: mqttd.DeadLetters{Envelope: mqttd.EnvelopeJSON}})
	offlineSubscriber(t, addr, "sub", "t/#")
	got := &collector{}
	rd := pahoConnect(t, addr, "reader", nil)
	wait(t, rd.Subscribe("$DLQ/#", 1, got.handler))
	pub := connect5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	publish5(t, pub, "t/1", "first", nil)
	publish5(t, pub, "t/2", "{\"v\":2}", nil)
	waitFor(t, "the letter", func() bool { return got.len() == 1 })
	m := got.get(0)
	var e struct {
		Reason, Topic, Payload string
		ClientID               string `json:"client_id"`
		Deliveries             int
		QoS                    int
	}
	if err := json.Unmarshal(m.Payload(), &e); err != nil {
		t.Fatalf("letter %q: %v", m.Payload(), err)
	}
	if m.Topic() != "$DLQ/queue_full/t/2" || e.Reason != "queue_full" || e.Topic != "t/2" || e.ClientID != "sub" ||
		e.Payload != "{\"v\":2}" || e.QoS != 1 {
		t.Errorf("letter on %s: %+v", m.Topic(), e)
	}
}

// TestDeadLettersBounded: the letters kept are bounded by max_letters
// (the oldest cleared), and those set aside by the rate, the rest counted
// as skipped.
func TestDeadLettersBounded(t *testing.T) {
	t.Run("max_letters", func(t *testing.T) {
		srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxQueued: 1},
			DeadLetters: mqttd.DeadLetters{MaxLetters: 2}})
		offlineSubscriber(t, addr, "sub", "t/#")
		pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
		for i := range 5 {
			publishQoS1(pub, uint16(i+1), "t/"+strconv.Itoa(i), false)
		}
		waitFor(t, "four letters", func() bool { return srv.Stats().DeadLetters["queue_full"] == 4 })
		page, _ := srv.RetainedTopics("$DLQ/", 100, 0)
		var kept []string
		for _, rt := range page {
			if strings.HasPrefix(rt.Topic, "$DLQ/") {
				kept = append(kept, rt.Topic)
			}
		}
		if len(kept) != 2 || kept[0] != "$DLQ/queue_full/t/3" || kept[1] != "$DLQ/queue_full/t/4" {
			t.Errorf("letters kept %v: want the last two", kept)
		}
	})
	t.Run("rate", func(t *testing.T) {
		srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxQueued: 1},
			DeadLetters: mqttd.DeadLetters{Rate: 1}})
		offlineSubscriber(t, addr, "sub", "t/#")
		pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
		var burst []byte
		for i := range 6 {
			burst = append(burst, encode(t, &packets.Publish{Topic: "t/x", QoS: 1, PacketID: uint16(i + 1), Payload: []byte("x")}, packets.V311)...)
		}
		pub.write(burst) // one read: the five drops come within the same second
		for range 6 {
			if _, ok := pub.read().(*packets.Puback); !ok {
				t.Fatal("no PUBACK")
			}
		}
		waitFor(t, "the letters counted", func() bool {
			st := srv.Stats()
			return st.DeadLetters["queue_full"]+st.DeadLettersSkipped["queue_full"] == 5
		})
		if st := srv.Stats(); st.DeadLetters["queue_full"] != 1 || st.DeadLettersSkipped["queue_full"] != 4 {
			t.Errorf("set aside %d, skipped %d: want 1 and 4 at a rate of 1 a second",
				st.DeadLetters["queue_full"], st.DeadLettersSkipped["queue_full"])
		}
	})
}

// TestDeadLettersOff: with dead letters disabled a message given up on is
// only counted as dropped.
func TestDeadLettersOff(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxQueued: 1},
		DeadLetters: mqttd.DeadLetters{Disabled: true}})
	offlineSubscriber(t, addr, "sub", "t/#")
	watch := connectSubscribed(t, &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V311, ClientID: "w", CleanStart: true},
		addr, packets.Subscription{Filter: "$DLQ/#", Options: qos(1)})
	pub := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
	publishQoS1(pub, 1, "t/1", false)
	publishQoS1(pub, 2, "t/2", false)
	waitFor(t, "the drop", func() bool { return srv.Stats().Dropped["queue_full"] == 1 })
	expectNothing(watch)
	if st := srv.Stats(); st.DeadLetters["queue_full"] != 0 {
		t.Errorf("dead letters %v with dead letters off", st.DeadLetters)
	}
}

// TestDeadLettersKeptAcrossRestart: the letters kept are in the retained
// store, so they outlive a restart, and still count against max_letters
// after it.
func TestDeadLettersKeptAcrossRestart(t *testing.T) {
	opts := mqttd.Options{DataDir: t.TempDir(), Limits: mqttd.Limits{MaxQueued: 1}, DeadLetters: mqttd.DeadLetters{MaxLetters: 2}}
	drop := func(b *broker, topics ...string) {
		t.Helper()
		pub := connectAs(t, b.addr, packets.V311, &packets.Connect{ClientID: "pub", CleanStart: true})
		for i, topic := range topics {
			publishQoS1(pub, uint16(i+1), topic, false)
		}
	}
	kept := func(srv *mqttd.Server) []string {
		page, _ := srv.RetainedTopics("$DLQ/", 100, 0)
		var topics []string
		for _, rt := range page {
			if strings.HasPrefix(rt.Topic, "$DLQ/") {
				topics = append(topics, rt.Topic)
			}
		}
		return topics
	}
	b := startBroker(t, opts)
	offlineSubscriber(t, b.addr, "sub", "t/#")
	drop(b, "t/0", "t/1", "t/2")
	waitFor(t, "two letters", func() bool { return b.srv.Stats().DeadLetters["queue_full"] == 2 })
	b.stop()
	b = startBroker(t, opts)
	if got := kept(b.srv); len(got) != 2 {
		t.Fatalf("after the restart the letters kept are %v, want the two set aside before", got)
	}
	drop(b, "t/3")
	waitFor(t, "the letter", func() bool { return b.srv.Stats().DeadLetters["queue_full"] == 1 })
	if got := kept(b.srv); len(got) != 2 || got[0] != "$DLQ/queue_full/t/2" || got[1] != "$DLQ/queue_full/t/3" {
		t.Errorf("letters kept %v: want t/2's and t/3's, the oldest cleared", got)
	}
}

// TestDeadLettersValidate: each wrong dead_letters setting is named.
func TestDeadLettersValidate(t *testing.T) {
	for _, tc := range []struct {
		d   mqttd.DeadLetters
		key string
	}{
		{mqttd.DeadLetters{Reasons: []string{"expired", "lost"}}, "dead_letters.reasons"},
		{mqttd.DeadLetters{MaxDeliveries: 256}, "dead_letters.max_deliveries"},
		{mqttd.DeadLetters{MaxLetters: -1}, "dead_letters.max_letters"},
		{mqttd.DeadLetters{MaxBytes: -1}, "dead_letters.max_bytes"},
		{mqttd.DeadLetters{Rate: -1}, "dead_letters.rate"},
		{mqttd.DeadLetters{Envelope: "xml"}, "dead_letters.envelope"},
	} {
		err := mqttd.Options{DeadLetters: tc.d}.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%+v: %v, want an error naming %s", tc.d, err, tc.key)
		}
	}
	if err := (mqttd.Options{DeadLetters: mqttd.DeadLetters{Reasons: []string{"no_subscribers"}, Envelope: "json"}}).Validate(); err != nil {
		t.Errorf("valid settings refused: %v", err)
	}
}

// TestDeadLetterNoSubscribers: when listed, a QoS 1/2 message nobody
// subscribes to is set aside, naming its publisher; not by default.
func TestDeadLetterNoSubscribers(t *testing.T) {
	for _, on := range []bool{false, true} {
		var d mqttd.DeadLetters
		if on {
			d.Reasons = []string{"no_subscribers"}
		}
		srv, addr := startServer(t, mqttd.Options{DeadLetters: d})
		r := reviewer(t, addr)
		pub := connect5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
		if res := pub.publish(t, &paho.Publish{Topic: "nobody/here", QoS: 1, Payload: []byte("hello")}); res.ReasonCode != byte(packets.NoMatchingSubscribers) {
			t.Fatalf("PUBACK %#x, want 0x10", res.ReasonCode)
		}
		if on {
			expectLetter(t, r, "no_subscribers", "nobody/here", "hello", "pub", 0)
		} else if n := srv.Stats().DeadLetters["no_subscribers"]; n != 0 {
			t.Errorf("%d no_subscribers letters by default", n)
		}
	}
}
