package mqttd

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"mqttd/packets"
)

// The $SYS tree over time, in synctest bubbles: a Server from New that
// does not serve, with only the $SYS goroutine started, so that hours of
// intervals pass at once and synctest.Wait returns once an update is
// done. What arrives is watched through an inline subscriber, whose
// deliveries count as nothing, so watching changes no value.

// sysWatch records what an inline subscriber to $SYS/broker/# received.
type sysWatch struct {
	mu       sync.Mutex
	latest   map[string]string
	received int  // messages
	retained bool // any of them was sent as retained
}

func watchSys(t *testing.T, s *Server) *sysWatch {
	t.Helper()
	w := &sysWatch{latest: make(map[string]string)}
	if _, err := s.Subscribe(sysPrefix+"#", func(m Message) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.latest[m.Topic] = string(m.Payload)
		w.received++
		w.retained = w.retained || m.Retain
	}); err != nil {
		t.Fatal(err)
	}
	return w
}

// take returns what arrived since the last take: how many messages, and
// the latest payload of each topic.
func (w *sysWatch) take() (int, map[string]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, latest := w.received, w.latest
	w.received, w.latest = 0, make(map[string]string)
	return n, latest
}

// TestSysNothingWithoutSubscriber runs an idle broker for a hundred
// intervals with nobody subscribed to $SYS: nothing is published or
// retained. The first subscriber then gets every value at once, live
// (nothing was retained before it came), and afterwards only what
// changes: nothing for intervals in which nothing happened, the uptime
// when a second has passed.
func TestSysNothingWithoutSubscriber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 10 * time.Millisecond
		s := startSys(t, interval)
		advance(100*interval + interval/2)
		if n := s.retain.Len(); n != 0 {
			t.Fatalf("%d topics retained with nobody subscribed to $SYS", n)
		}
		if st := s.Stats(); st.MessagesReceived != 0 || st.MessagesSent != 0 || st.Retained != 0 {
			t.Fatalf("the idle broker moved its stats: %+v", st)
		}

		w := watchSys(t, s)
		synctest.Wait() // the subscription woke the tree
		n, got := w.take()
		if w.retained {
			t.Error("a value came as retained: something was published before anybody subscribed")
		}
		if n != len(got) || n < 40 {
			t.Fatalf("%d messages on %d topics after subscribing, want every topic once", n, len(got))
		}
		for topic, want := range map[string]string{
			sysPrefix + "version":                     "mqttd version v0.0.0-test",
			sysPrefix + "uptime":                      "1 seconds",
			sysPrefix + "clients/connected":           "0",
			sysPrefix + "subscriptions/count":         "1", // the watcher
			sysPrefix + "messages/received":           "0",
			sysPrefix + "load/messages/received/1min": "0.00",
		} {
			if got[topic] != want {
				t.Errorf("%s = %q, want %q", topic, got[topic], want)
			}
		}
		if s.retain.Len() != n {
			t.Errorf("%d topics retained, want the %d published", s.retain.Len(), n)
		}
		st := s.Stats()
		if st.Retained != 0 || st.RetainedBytes != 0 || st.MessagesReceived != 0 {
			t.Errorf("$SYS values counted as retained or received: %+v", st)
		}

		advance(50 * interval) // within the same second of uptime
		if n, got := w.take(); n != 0 {
			t.Errorf("%d messages in intervals in which nothing changed: %v", n, got)
		}
		advance(time.Second)
		if n, got := w.take(); n != 1 || got[sysPrefix+"uptime"] != "2 seconds" {
			t.Errorf("a second later: %d messages %v, want the uptime alone", n, got)
		}
	})
}

// TestSysLoads checks the load averages against what Mosquitto's
// formula makes of a burst: N messages in one interval give a 1-minute
// load (per minute) of about N, which then falls by e every minute; the
// 5- and 15-minute loads rise by a fifth and a fifteenth of it.
func TestSysLoads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := startSys(t, time.Second)
		w := watchSys(t, s)
		synctest.Wait()
		w.take() // the values as the watcher came
		for range 60 {
			if err := s.Publish("burst", []byte("x"), 0, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		advance(time.Second + time.Millisecond)
		load := func(latest map[string]string, name string) float64 {
			t.Helper()
			v, err := strconv.ParseFloat(latest[sysPrefix+"load/"+name], 64)
			if err != nil {
				t.Fatalf("load/%s: %v", name, err)
			}
			return v
		}
		_, got := w.take()
		for name, want := range map[string]float64{
			"messages/received/1min": 60 * 60 * (1 - math.Exp(-1.0/60)), "messages/received/5min": 60 * 60 * (1 - math.Exp(-1.0/300)),
			"messages/received/15min": 60 * 60 * (1 - math.Exp(-1.0/900)), "publish/received/1min": 60 * 60 * (1 - math.Exp(-1.0/60)),
		} {
			if v := load(got, name); math.Abs(v-want) > 0.01 {
				t.Errorf("load/%s = %v after a burst of 60, want %.2f", name, v, want)
			}
		}
		if v := load(got, "messages/received/1min"); v < 59 || v > 60 {
			t.Errorf("1-minute load %v after 60 messages, want about 60", v)
		}
		if got[sysPrefix+"messages/received"] != "60" || got[sysPrefix+"load/messages/sent/1min"] != "" {
			t.Errorf("messages/received %q, load/messages/sent/1min %q: want 60, and no change from 0.00",
				got[sysPrefix+"messages/received"], got[sysPrefix+"load/messages/sent/1min"])
		}
		first := load(got, "messages/received/1min")
		advance(time.Minute)
		_, got = w.take()
		if v, want := load(got, "messages/received/1min"), first/math.E; math.Abs(v-want) > 0.01 {
			t.Errorf("1-minute load %v a quiet minute later, want %v/e = %.2f", v, first, want)
		}
	})
}

// TestSysForeignRetainedReplaced checks that a retained message under
// $SYS/broker/ left by another publisher (one the store gave back from
// before $SYS was on, say) is taken out of the retained store's count
// when the broker's value replaces it.
func TestSysForeignRetainedReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestServer(t, Options{SysInterval: 10 * time.Millisecond})
		s.storeRetained(newMessage(sysPrefix+"uptime", []byte("forged"), 0, true, new(packets.Properties), "old"), nil)
		if st := s.Stats(); st.Retained != 1 {
			t.Fatalf("%d retained, want the forged one", st.Retained)
		}
		s.sys.start(s)
		w := watchSys(t, s)
		synctest.Wait()
		if _, got := w.take(); !strings.HasSuffix(got[sysPrefix+"uptime"], " seconds") {
			t.Errorf("uptime %q", got[sysPrefix+"uptime"])
		}
		if st := s.Stats(); st.Retained != 0 || st.RetainedBytes != 0 {
			t.Errorf("the replaced message still counted: %d retained, %d bytes", st.Retained, st.RetainedBytes)
		}
	})
}

// advance moves a synctest bubble's fake clock on by d, then waits until
// every goroutine of the bubble has done what that time brought: in real
// time it returns at once, as soon as they are blocked again.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}
