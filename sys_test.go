package mqttd_test

import (
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd"
	"mqttd/packets"
)

// sysTopics are the topics of the $SYS tree, Mosquitto's names.
var sysTopics = func() []string {
	topics := []string{"version", "uptime",
		"clients/connected", "clients/disconnected", "clients/total", "clients/maximum", "clients/expired",
		"messages/received", "messages/sent",
		"publish/messages/received", "publish/messages/sent", "publish/messages/dropped",
		"bytes/received", "bytes/sent", "subscriptions/count", "retained messages/count",
		"store/messages/count", "store/messages/bytes", "heap/current",
		"dead_letters/expired", "dead_letters/queue_full", "dead_letters/too_large", "dead_letters/delivery_limit",
		"dead_letters/no_subscribers"}
	for _, load := range []string{"messages/received", "messages/sent", "publish/received", "publish/sent",
		"publish/dropped", "bytes/received", "bytes/sent", "connections"} {
		for _, window := range []string{"1min", "5min", "15min"} {
			topics = append(topics, "load/"+load+"/"+window)
		}
	}
	for i, topic := range topics {
		topics[i] = "$SYS/broker/" + topic
	}
	return topics
}()

// readSys reads from rc until it has a message on every $SYS topic and
// returns the first of each, failing on a message sent as retained
// unless retained is set, and on one not sent as retained if it is.
func readSys(t *testing.T, rc *rawConn, retained bool) map[string]string {
	t.Helper()
	first := make(map[string]string)
	for len(first) < len(sysTopics) {
		p, ok := rc.read().(*packets.Publish)
		if !ok || !strings.HasPrefix(p.Topic, "$SYS/broker/") || p.QoS != 0 {
			t.Fatalf("got %+v, want a QoS 0 $SYS/broker/ PUBLISH", p)
		}
		if p.Retain != retained {
			t.Fatalf("%s sent with retain %v, want %v", p.Topic, p.Retain, retained)
		}
		if _, seen := first[p.Topic]; !seen {
			first[p.Topic] = string(p.Payload)
		}
	}
	for _, topic := range sysTopics {
		if _, ok := first[topic]; !ok {
			t.Errorf("no %s among %v", topic, first)
		}
	}
	return first
}

// TestSysAfterWorkload runs a script (four clients, one of them a
// persistent session that goes away, three subscriptions, four messages
// of known sizes delivered twice each, two retained) and then subscribes
// to $SYS/broker/#: the values that arrive are what the script did. They
// arrive live, none retained, which shows nothing was published while
// nobody listened; a later subscriber (paho) gets them as retained, and
// not a value a client tried to put there.
func TestSysAfterWorkload(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{SysInterval: 20 * time.Millisecond, Version: "v9.9.9-test"})
	p1 := connectRawSession(t, addr, "p1", false, false)
	subscribe(p1, packets.Subscription{Filter: "w/#"}, packets.Subscription{Filter: "x"})
	connectRawSession(t, addr, "p2", false, false).send(&packets.Disconnect{})
	c1 := connectRawSession(t, addr, "c1", true, false)
	subscribe(c1, packets.Subscription{Filter: "w/a"})
	pub := connectRawSession(t, addr, "pub", true, false)
	var payloadBytes int
	for i, size := range []int{10, 20, 30, 40} {
		pub.send(&packets.Publish{Topic: "w/a", QoS: 1, PacketID: uint16(i + 1), Payload: make([]byte, size)})
		pub.read()
		payloadBytes += size
		expectPublish(p1, "w/a")
		expectPublish(c1, "w/a")
	}
	for i, topic := range []string{"r/1", "r/2"} {
		publishQoS1(pub, uint16(10+i), topic, true)
	}
	waitFor(t, "p2 offline", func() bool { return srv.Stats().SessionsOnline == 3 })

	sys := connectRawSession(t, addr, "sys", true, false)
	subscribe(sys, packets.Subscription{Filter: "$SYS/broker/#"})
	got := readSys(t, sys, false)
	for topic, want := range map[string]string{
		"version":                   "mqttd version v9.9.9-test",
		"clients/connected":         "4", // p1, c1, pub, sys
		"clients/disconnected":      "1", // p2
		"clients/total":             "5",
		"clients/maximum":           "5",
		"clients/expired":           "0",
		"messages/received":         "6", // four, and two retained
		"publish/messages/received": "6",
		"messages/sent":             "8", // four, to two subscribers
		"publish/messages/sent":     "8",
		"publish/messages/dropped":  "0",
		"subscriptions/count":       "4", // w/#, x, w/a and $SYS/broker/#
		"retained messages/count":   "2",
		"store/messages/count":      "2", // nothing queued, two retained
		"store/messages/bytes":      strconv.Itoa(2 * 2 * len("r/1")),
	} {
		if got["$SYS/broker/"+topic] != want {
			t.Errorf("%s = %q, want %q", topic, got["$SYS/broker/"+topic], want)
		}
	}
	if up := got["$SYS/broker/uptime"]; !regexp.MustCompile(`^[0-9]+ seconds$`).MatchString(up) {
		t.Errorf("uptime %q, want Mosquitto's \"N seconds\"", up)
	}
	for _, topic := range []string{"load/messages/received/1min", "load/connections/1min", "load/bytes/received/15min"} {
		if v, err := strconv.ParseFloat(got["$SYS/broker/"+topic], 64); err != nil || v <= 0 ||
			!regexp.MustCompile(`^[0-9]+\.[0-9]{2}$`).MatchString(got["$SYS/broker/"+topic]) {
			t.Errorf("%s = %q, want a positive load with two decimals", topic, got["$SYS/broker/"+topic])
		}
	}
	// The live heap as the memory watch last saw it, as
	// mqttd_heap_live_bytes: 0 until the first collection.
	if heap, err := strconv.ParseInt(got["$SYS/broker/heap/current"], 10, 64); err != nil || heap < 0 {
		t.Errorf("heap/current %q", got["$SYS/broker/heap/current"])
	}
	received, _ := strconv.ParseUint(got["$SYS/broker/bytes/received"], 10, 64)
	sent, _ := strconv.ParseUint(got["$SYS/broker/bytes/sent"], 10, 64)
	st := srv.Stats()
	if received != st.BytesReceived || received < uint64(payloadBytes) {
		t.Errorf("bytes/received %d: Stats says %d, and the payloads alone were %d", received, st.BytesReceived, payloadBytes)
	}
	if sent > st.BytesSent || sent < uint64(2*payloadBytes) {
		t.Errorf("bytes/sent %d: Stats says %d now, and the payloads delivered alone were %d", sent, st.BytesSent, 2*payloadBytes)
	}
	if st.Retained != 2 || st.MessagesReceived != 6 {
		t.Errorf("Stats: %d retained, %d received: $SYS values must count as neither", st.Retained, st.MessagesReceived)
	}

	// $SYS stays read-only with the tree on: a client's value is refused
	// and does not replace the broker's.
	forger := connectAs(t, addr, packets.V5, &packets.Connect{ClientID: "forger", CleanStart: true})
	if code := publishQoS1(forger, 1, "$SYS/broker/uptime", true); code != packets.NotAuthorized {
		t.Errorf("a client's retained $SYS/broker/uptime: PUBACK %#x, want 0x87", byte(code))
	}

	// A later subscriber gets the values retained at once; with paho.
	var mu sync.Mutex
	retained := make(map[string]string)
	late := pahoConnect(t, addr, "late", nil)
	wait(t, late.Subscribe("$SYS/broker/#", 0, func(_ paho.Client, m paho.Message) {
		mu.Lock()
		defer mu.Unlock()
		if m.Retained() {
			retained[m.Topic()] = string(m.Payload())
		}
	}))
	waitFor(t, "every $SYS value retained for paho", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(retained) == len(sysTopics)
	})
	mu.Lock()
	defer mu.Unlock()
	if v := retained["$SYS/broker/retained messages/count"]; v != "2" {
		t.Errorf("retained messages/count retained as %q, want 2", v)
	}
	if v := retained["$SYS/broker/uptime"]; !strings.HasSuffix(v, " seconds") {
		t.Errorf("uptime retained as %q", v)
	}
}

// TestSysIdleWritesNothing checks that an idle durable broker publishes
// nothing while nobody subscribes to $SYS (over a hundred intervals no
// message is sent or committed, the idle client gets nothing) and retains
// nothing (the first value a subscriber then gets is live); that the
// values are never written to the store (they are rebuilt at every
// start); and that a broker restarted on the same store with $SYS off
// has none of them.
func TestSysIdleWritesNothing(t *testing.T) {
	dir := t.TempDir()
	const interval = 2 * time.Millisecond
	b := startBroker(t, mqttd.Options{DataDir: dir, SysInterval: interval})
	idle := connectRawSession(t, b.addr, "idle", false, false)
	subscribe(idle, packets.Subscription{Filter: "#"})
	before := b.srv.Stats()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for range 100 {
		<-tick.C
		if st := b.srv.Stats(); st.MessagesSent != 0 || st.StoreCommits != before.StoreCommits {
			t.Fatalf("the idle broker did something: %d messages sent, %d commits (%d before)",
				st.MessagesSent, st.StoreCommits, before.StoreCommits)
		}
	}
	expectNothing(idle)

	sys := connectRawSession(t, b.addr, "sys", true, false)
	subscribe(sys, packets.Subscription{Filter: "$SYS/broker/uptime"})
	if p := expectPublish(sys, "$SYS/broker/uptime"); p.Retain {
		t.Error("the uptime came as retained: it was published while nobody listened")
	}
	commits := b.srv.Stats().StoreCommits
	for range 100 {
		<-tick.C
	}
	if st := b.srv.Stats(); st.StoreCommits != commits {
		t.Errorf("%d commits while only $SYS values changed", st.StoreCommits-commits)
	}
	b.stop()

	again := startBroker(t, mqttd.Options{DataDir: dir, SysInterval: -1})
	watch := connectRawSession(t, again.addr, "watch", true, false)
	subscribe(watch, packets.Subscription{Filter: "$SYS/#"})
	expectNothing(watch)
	if st := again.srv.Stats(); st.Retained != 0 {
		t.Errorf("%d retained messages came back from the store", st.Retained)
	}
}

// TestSysOptions checks sys_interval's validation (10 ns, meant as
// seconds, is refused, naming the key) and
// that while $SYS is on the inline API cannot retain a message where the
// broker keeps its values.
func TestSysOptions(t *testing.T) {
	_, err := mqttd.New(mqttd.Options{SysInterval: 10})
	if err == nil || !strings.Contains(err.Error(), "sys_interval") {
		t.Errorf("New with sys_interval 10ns: %v, want an error naming sys_interval", err)
	}
	for _, d := range []time.Duration{-1, 0, time.Millisecond, time.Hour} {
		if err := (mqttd.Options{SysInterval: d}).Validate(); err != nil {
			t.Errorf("sys_interval %s: %v", d, err)
		}
	}
	if got := (mqttd.Options{}).WithDefaults().SysInterval; got != mqttd.DefaultSysInterval {
		t.Errorf("default sys_interval %s, want %s", got, mqttd.DefaultSysInterval)
	}
	on, _ := startServer(t, mqttd.Options{})
	if err := on.Publish("$SYS/broker/uptime", []byte("1 seconds"), 0, true, nil); err == nil {
		t.Error("a retained message under $SYS/broker/ accepted while $SYS is on")
	}
	if err := on.Publish("$SYS/broker/note", []byte("x"), 0, false, nil); err != nil {
		t.Errorf("a message under $SYS/broker/ not retained: %v", err)
	}
	off, _ := startServer(t, mqttd.Options{SysInterval: -1})
	if err := off.Publish("$SYS/broker/uptime", []byte("1 seconds"), 0, true, nil); err != nil {
		t.Errorf("with $SYS off, the program's own retained $SYS/broker/uptime: %v", err)
	}
}
