package mqttd_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"mqttd"
	"mqttd/packets"
)

// sessionOf is the session of id as Clients lists it.
func sessionOf(t *testing.T, srv *mqttd.Server, id string) (mqttd.ClientState, bool) {
	t.Helper()
	page, _ := srv.Clients("", 0)
	i := slices.IndexFunc(page, func(c mqttd.ClientState) bool { return c.ID == id })
	if i < 0 {
		return mqttd.ClientState{}, false
	}
	return page[i], true
}

// offline waits until the broker has seen id's client go: its client
// sees the connection closed before the broker has released the session.
func offline(t *testing.T, srv *mqttd.Server, id string) {
	t.Helper()
	waitFor(t, id+" offline", func() bool { st, ok := srv.Client(id); return ok && !st.Connected })
}

// TestAdminDisconnect: Disconnect tells a 5.0 client DISCONNECT 0x98,
// closes it, publishes its will (the client did not end the connection
// itself) and keeps its persistent session; an offline session is not
// connected, an unknown id has no session.
func TestAdminDisconnect(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	watcher := connectSubscribed(t, &packets.Connect{ClientID: "watcher", CleanStart: true}, addr,
		packets.Subscription{Filter: "will", Options: qos(0)})
	dev := willClient(t, addr, "dev", 0, 300, true)
	if err := srv.Disconnect("dev", false); err != nil {
		t.Fatalf("Disconnect: %v", err)
	}
	if d, ok := dev.read().(*packets.Disconnect); !ok || d.ReasonCode != packets.AdministrativeAction {
		t.Fatalf("got %+v, want DISCONNECT 0x98", d)
	}
	dev.expectClosed()
	if p, ok := watcher.read().(*packets.Publish); !ok || p.Topic != "will" {
		t.Fatalf("got %+v, want the will", p)
	}
	st, ok := sessionOf(t, srv, "dev")
	if !ok || st.Connected || !st.Persistent {
		t.Fatalf("after Disconnect: %+v (listed %v), want its persistent session offline", st, ok)
	}
	if got := srv.Stats().Disconnects["administrative"]; got != 1 {
		t.Errorf("disconnects{administrative} = %d, want 1", got)
	}
	if err := srv.Disconnect("dev", false); !errors.Is(err, mqttd.ErrNotConnected) {
		t.Errorf("Disconnect of an offline session: %v, want ErrNotConnected", err)
	}
	if err := srv.Disconnect("nobody", false); !errors.Is(err, mqttd.ErrNoSession) {
		t.Errorf("Disconnect of an unknown id: %v, want ErrNoSession", err)
	}
	if _, present := reconnect5(t, addr, "dev", 300); !present {
		t.Error("the session was not kept")
	}
}

// TestAdminDisconnectDiscardSession: with discardSession the session ends
// with the connection, stored or not: gone from the listing and the
// store, its delayed will published at once, and the client comes back
// to no session.
func TestAdminDisconnectDiscardSession(t *testing.T) {
	opts := mqttd.Options{DataDir: t.TempDir()}
	b := startBroker(t, opts)
	srv, addr := b.srv, b.addr
	watcher := connectSubscribed(t, &packets.Connect{ClientID: "watcher", CleanStart: true}, addr,
		packets.Subscription{Filter: "will", Options: qos(0)})
	dev := willClient(t, addr, "dev", 3600, 3600, true)
	subscribe(dev, packets.Subscription{Filter: "cmd/#", Options: qos(1)})
	subs := srv.Stats().Subscriptions
	if err := srv.Disconnect("dev", true); err != nil {
		t.Fatalf("Disconnect: %v", err)
	}
	dev.expectClosed()
	if p, ok := watcher.read().(*packets.Publish); !ok || p.Topic != "will" {
		t.Fatalf("got %+v, want the will, published as its session ended", p)
	}
	if _, ok := sessionOf(t, srv, "dev"); ok {
		t.Fatal("the session is still listed")
	}
	if got := srv.Stats().Subscriptions; got != subs-1 {
		t.Errorf("subscriptions %d, want %d", got, subs-1)
	}
	addr = restarted(t, b, opts, "dev")
	if _, present := reconnect5(t, addr, "dev", 300); present {
		t.Error("the session was resumed: want it discarded")
	}
}

// TestAdminDeleteSession: an offline session goes with its queue and its
// subscriptions; an online one and an unknown id are refused.
func TestAdminDeleteSession(t *testing.T) {
	opts := mqttd.Options{DataDir: t.TempDir()}
	b := startBroker(t, opts)
	srv, addr := b.srv, b.addr
	offlineSubscriber(t, addr, "dev", "t/#")
	offline(t, srv, "dev")
	pub := connectRaw(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	publishQoS1(pub, 1, "t/1", false)
	waitFor(t, "a message queued", func() bool { return srv.Stats().Queued == 1 })
	if err := srv.DeleteSession("pub"); !errors.Is(err, mqttd.ErrSessionOnline) {
		t.Errorf("DeleteSession of an online session: %v, want ErrSessionOnline", err)
	}
	if err := srv.DeleteSession("nobody"); !errors.Is(err, mqttd.ErrNoSession) {
		t.Errorf("DeleteSession of an unknown id: %v, want ErrNoSession", err)
	}
	if err := srv.DeleteSession("dev"); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	if st := srv.Stats(); st.Queued != 0 || st.Subscriptions != 0 || st.Sessions != 1 {
		t.Errorf("after DeleteSession: queued %d, subscriptions %d, sessions %d; want 0, 0, 1",
			st.Queued, st.Subscriptions, st.Sessions)
	}
	addr = restarted(t, b, opts, "dev")
	connectRawSession(t, addr, "dev", false, false)
}

// restarted stops b and starts a broker on its store, which must not
// hold id's session, and returns its address.
func restarted(t *testing.T, b *broker, opts mqttd.Options, id string) string {
	t.Helper()
	b.stop()
	b = startBroker(t, opts)
	if st, ok := b.srv.Client(id); ok {
		t.Errorf("after a restart the store still had the session: %+v", st)
	}
	return b.addr
}

// TestAdminDeleteRetained: a retained message is cleared, and its
// subscribers told; an absent topic and the broker's $SYS values are
// refused.
func TestAdminDeleteRetained(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	pub := connectRaw(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	publishQoS1(pub, 1, "r/1", true)
	waitFor(t, "the message retained", func() bool { return srv.Stats().Retained == 1 })
	if err := srv.DeleteRetained("r/1"); err != nil {
		t.Fatalf("DeleteRetained: %v", err)
	}
	if page, _ := srv.RetainedTopics("", 0, 0); len(page) != 0 {
		t.Errorf("retained after the delete: %+v", page)
	}
	if err := srv.DeleteRetained("r/1"); !errors.Is(err, mqttd.ErrNoRetained) {
		t.Errorf("DeleteRetained of an absent topic: %v, want ErrNoRetained", err)
	}
	if err := srv.DeleteRetained("$SYS/broker/uptime"); !errors.Is(err, mqttd.ErrBrokerTopic) {
		t.Errorf("DeleteRetained of a $SYS value: %v, want ErrBrokerTopic", err)
	}
}

// TestAdminDeadLetters: a letter is listed with what it says; republished,
// its message reaches the original topic's subscribers with its
// properties and without the dlq-* ones, and the letter is gone;
// dropped, it is gone; an absent letter is refused.
func TestAdminDeadLetters(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{Limits: mqttd.Limits{MaxQueued: 1}})
	offlineSubscriber(t, addr, "sub", "t/#")
	offline(t, srv, "sub")
	r := reviewer(t, addr)
	pub := connect5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	publish5(t, pub, "t/1", "first", nil)
	publish5(t, pub, "t/2", "second", &paho.PublishProperties{ContentType: "text/plain",
		User: paho.UserProperties{{Key: "k", Value: "v"}}})
	publish5(t, pub, "t/3", "third", nil)
	expectLetter(t, r, "queue_full", "t/2", "second", "sub", 0)
	expectLetter(t, r, "queue_full", "t/3", "third", "sub", 0)

	page, next := srv.DeadLetters("", 1, 3)
	if len(page) != 1 || next != "$DLQ/queue_full/t/2" {
		t.Fatalf("first page %+v, next %q", page, next)
	}
	l := page[0]
	if l.Topic != "$DLQ/queue_full/t/2" || l.Reason != "queue_full" || l.OriginalTopic != "t/2" || l.ClientID != "sub" ||
		l.PayloadSize != 6 || string(l.Payload) != "sec" || l.Time.IsZero() {
		t.Errorf("letter %+v", l)
	}
	if kept := srv.Overview().DeadLetters; kept["queue_full"] != 2 {
		t.Errorf("overview's dead letters %v, want 2 queue_full", kept)
	}

	// The message would only fill sub's queue again, and be set aside again.
	if err := srv.DeleteSession("sub"); err != nil {
		t.Fatal(err)
	}
	live := connect5(t, addr, &paho.Connect{ClientID: "live", CleanStart: true}, nil)
	live.subscribe(t, "t/2", 1)
	if err := srv.RepublishDeadLetter("$DLQ/queue_full/t/2"); err != nil {
		t.Fatalf("RepublishDeadLetter: %v", err)
	}
	m := live.next(t)
	if m.Topic != "t/2" || string(m.Payload) != "second" || m.Properties.ContentType != "text/plain" ||
		len(m.Properties.User) != 1 || m.Properties.User[0].Key != "k" {
		t.Errorf("republished: %s %q %+v", m.Topic, m.Payload, m.Properties)
	}
	if err := srv.DropDeadLetter("$DLQ/queue_full/t/3"); err != nil {
		t.Fatalf("DropDeadLetter: %v", err)
	}
	if page, _ := srv.DeadLetters("", 0, 0); len(page) != 0 {
		t.Errorf("letters left: %+v", page)
	}
	for _, topic := range []string{"$DLQ/queue_full/t/2", "t/1", "$DLQ/nothing"} {
		if err := srv.DropDeadLetter(topic); !errors.Is(err, mqttd.ErrNoDeadLetter) {
			t.Errorf("DropDeadLetter(%q): %v, want ErrNoDeadLetter", topic, err)
		}
		if err := srv.RepublishDeadLetter(topic); !errors.Is(err, mqttd.ErrNoDeadLetter) {
			t.Errorf("RepublishDeadLetter(%q): %v, want ErrNoDeadLetter", topic, err)
		}
	}
}

// TestAdminOverview: the overview counts the sessions online and offline,
// names the listener, says there is no store, and measures the rate of
// messages in and out.
func TestAdminOverview(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{Version: "v9"})
	offlineSubscriber(t, addr, "off", "x/#")
	offline(t, srv, "off")
	connectSubscribed(t, &packets.Connect{ClientID: "on", CleanStart: true}, addr,
		packets.Subscription{Filter: "o/#", Options: qos(0)})
	o := srv.Overview()
	if o.Version != "v9" || o.SessionsOnline != 1 || o.SessionsOffline != 1 || o.Store != "none" ||
		len(o.Listeners) != 1 || o.Listeners[0].Name != "test" || o.Listeners[0].Address != addr || o.Started.IsZero() {
		t.Fatalf("overview %+v", o)
	}
	c := connectRaw(t, addr, &packets.Connect{ClientID: "pub", CleanStart: true})
	for id := uint16(1); id <= 10; id++ {
		publishQoS1(c, id, "o/x", false)
	}
	waitFor(t, "rates of messages in and out", func() bool {
		o := srv.Overview()
		return o.MessagesInPerSecond > 0 && o.MessagesOutPerSecond > 0 && o.RateSeconds > 0
	})
}

// TestInspectClientsWhere: a search keeps the sessions whose client id or
// username contains it; Offline keeps those without a connection, with
// when their client left; Client reads one session.
func TestInspectClientsWhere(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	offlineSubscriber(t, addr, "sensor-1", "x/#")
	offline(t, srv, "sensor-1")
	connectRaw(t, addr, &packets.Connect{ClientID: "sensor-2", CleanStart: true})
	connectRaw(t, addr, &packets.Connect{ClientID: "pump", Username: "sensor-owner", UsernameFlag: true, CleanStart: true})
	ids := func(page []mqttd.ClientState) (ids []string) {
		for _, c := range page {
			ids = append(ids, c.ID)
		}
		return ids
	}
	page, next := srv.ClientsWhere("", 2, mqttd.ClientFilter{Search: "sensor"})
	if got := ids(page); !slices.Equal(got, []string{"pump", "sensor-1"}) || next != "sensor-1" {
		t.Errorf("search, first page: %v next %q", got, next)
	}
	if page, next := srv.ClientsWhere(next, 2, mqttd.ClientFilter{Search: "sensor"}); !slices.Equal(ids(page), []string{"sensor-2"}) || next != "" {
		t.Errorf("search, second page: %v next %q", ids(page), next)
	}
	page, _ = srv.ClientsWhere("", 0, mqttd.ClientFilter{Offline: true})
	if got := ids(page); !slices.Equal(got, []string{"sensor-1"}) || page[0].OfflineSince.IsZero() {
		t.Errorf("offline: %+v", page)
	}
	if st, ok := srv.Client("pump"); !ok || st.Username != "sensor-owner" || !st.Connected {
		t.Errorf("Client(pump) = %+v, %v", st, ok)
	}
	if _, ok := srv.Client("nobody"); ok {
		t.Error("Client(nobody) found a session")
	}
}
