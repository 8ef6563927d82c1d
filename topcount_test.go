package mqttd_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/internal/testutil"
)

// TestTopicCountsFromClients: paho clients publish to a few topics; the
// busiest topics list them by count, once a first read switched counting
// on, and only what was published since.
func TestTopicCountsFromClients(t *testing.T) {
	srv, addr := startServer(t, mqttd.Options{})
	pub := pahoConnect(t, addr, "pub", nil)
	wait(t, pub.Publish("before/on", 1, false, "x"))
	if got := srv.TopicCounts(10); len(got.Topics) != 0 {
		t.Fatalf("counted before the first read: %+v", got.Topics)
	}
	other := pahoConnect(t, addr, "other", nil)
	for i := range 30 {
		wait(t, pub.Publish("site/a", 1, false, "x"))
		if i < 20 {
			wait(t, other.Publish("site/b", 1, false, "x"))
		}
		if i < 10 {
			wait(t, pub.Publish("site/c", 0, false, "x"))
		}
	}
	wait(t, pub.Publish("site/c", 1, false, "last")) // after the QoS 0 ones on its connection
	got := srv.TopicCounts(10)
	want := []string{"site/a 30", "site/b 20", "site/c 11"}
	var have []string
	for _, c := range got.Topics {
		have = append(have, fmt.Sprintf("%s %d", c.Topic, c.Messages))
	}
	if fmt.Sprint(have) != fmt.Sprint(want) {
		t.Fatalf("topics %v, want %v", have, want)
	}
	if got := srv.TopicCounts(1); len(got.Topics) != 1 || got.Topics[0].Topic != "site/a" {
		t.Fatalf("limit 1: %+v", got.Topics)
	}
}

// TestTopicCountsBoundFromClients: a client publishing to more topics
// than the table holds leaves it at its bound, counted in the metrics and
// said once in the log, with the busiest topic first.
func TestTopicCountsBoundFromClients(t *testing.T) {
	reg := prometheus.NewRegistry()
	logs := &logLines{}
	srv, addr := startServer(t, mqttd.Options{Registerer: reg, Logger: zerolog.New(logs)})
	srv.TopicCounts(1)
	pub := pahoConnect(t, addr, "pub", nil)
	n := mqttd.MaxCountedTopics + MaxCountedExtra
	for i := range n {
		pub.Publish(fmt.Sprintf("dev/%d", i), 0, false, "x")
		if i%8 == 0 {
			pub.Publish("hot", 0, false, "x")
		}
	}
	wait(t, pub.Publish("hot", 1, false, "last"))
	got := srv.TopicCounts(2 * n)
	if len(got.Topics) != mqttd.MaxCountedTopics {
		t.Fatalf("%d topics counted, want the bound %d", len(got.Topics), mqttd.MaxCountedTopics)
	}
	if top := got.Topics[0]; top.Topic != "hot" || top.Messages < uint64(n/8) {
		t.Fatalf("busiest %+v, want hot with at least %d", top, n/8)
	}
	if v := metricValue(t, reg, "mqttd_topics_counted"); v != mqttd.MaxCountedTopics {
		t.Fatalf("mqttd_topics_counted %v", v)
	}
	if v := metricValue(t, reg, "mqttd_topics_replaced_total"); v < MaxCountedExtra {
		t.Fatalf("mqttd_topics_replaced_total %v, want at least %d", v, MaxCountedExtra)
	}
	full := "the busiest topics' table is full: a new topic takes the place of the least counted one and inherits its count " +
		"(mqttd_topics_replaced_total); said once while counting runs"
	if l := logs.find(full); len(l) != 1 || l[0]["topics"] != float64(mqttd.MaxCountedTopics) {
		t.Fatalf("log lines %v", l)
	}
}

// MaxCountedExtra is how many topics past the bound the bound test
// publishes to.
const MaxCountedExtra = 500

// TestTopicCountingSwitchesOff: without a read for the idle time counting
// stops and forgets, so what is published then is not counted, and the
// next read starts afresh.
func TestTopicCountingSwitchesOff(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, addr := startServer(t, mqttd.Options{Registerer: reg})
	srv.SetTopicCountTimes(10*time.Millisecond, 500*time.Millisecond)
	pub := pahoConnect(t, addr, "pub", nil)
	srv.TopicCounts(10)
	wait(t, pub.Publish("counted", 1, false, "x"))
	if !srv.TopicCounting() || metricValue(t, reg, "mqttd_topics_counted") != 1 {
		t.Fatal("not counting after a read")
	}
	testutil.WaitFor(t, "counting to switch off", func() bool { return !srv.TopicCounting() })
	if v := metricValue(t, reg, "mqttd_topics_counted"); v != 0 {
		t.Fatalf("mqttd_topics_counted %v while off", v)
	}
	wait(t, pub.Publish("not/counted", 1, false, "x"))
	if got := srv.TopicCounts(10); len(got.Topics) != 0 {
		t.Fatalf("counts after switching off: %+v", got.Topics)
	}
}
