package mqttd

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
)

// newTestTopicCounter returns a counter whose own sampler never samples:
// the test samples with times of its own.
func newTestTopicCounter(t *testing.T) *topicCounter {
	t.Helper()
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	tc := newTopicCounter(&stats{}, done, zerolog.Nop())
	tc.tick = time.Hour
	return tc
}

func (t *topicCounter) sampleAt(now time.Time) {
	t.sampleMu.Lock()
	t.sampleLocked(now)
	t.sampleMu.Unlock()
}

func (t *topicCounter) countN(topic string, n int) {
	for range n {
		t.count(topic)
	}
}

// TestTopicRates drives the samples through a clock of the test's own:
// a rate is the messages since the oldest of the last TopicRateWindow
// samples, a second apart, over the time since it.
func TestTopicRates(t *testing.T) {
	tc := newTestTopicCounter(t)
	t0 := time.Unix(1_000_000, 0)
	tc.read(t0)
	tc.countN("a", 5)
	if got := tc.snapshot(10, t0.Add(minRateWindow/2)); got.WindowSeconds != 0 || fmt.Sprint(got.Topics) != "[{a 5 0}]" {
		t.Fatalf("just after counting began: %+v", got)
	}
	if got := tc.snapshot(10, t0.Add(time.Second/2)); got.WindowSeconds != 0.5 || fmt.Sprint(got.Topics) != "[{a 5 10}]" {
		t.Fatalf("half a second after counting began: %+v", got)
	}
	// 20 messages of a and 40 of b a second for 15 seconds, then 1,000
	// of c in the 16th.
	for i := 1; i <= 15; i++ {
		tc.countN("a", 20)
		tc.countN("b", 40)
		tc.sampleAt(t0.Add(time.Duration(i) * time.Second))
	}
	tc.countN("c", 1000)
	got := tc.snapshot(10, t0.Add(16*time.Second))
	want := []TopicCount{{"c", 1000, 100}, {"b", 600, 36}, {"a", 305, 18}}
	if got.WindowSeconds != TopicRateWindow || fmt.Sprint(got.Topics) != fmt.Sprint(want) {
		t.Fatalf("got %+v, want %v over %d s", got, want, TopicRateWindow)
	}
	if got := tc.snapshot(1, t0.Add(16*time.Second)); len(got.Topics) != 1 || got.Topics[0].Topic != "c" {
		t.Fatalf("limit 1: %+v", got.Topics)
	}
}

// TestTopicCountsBounded: past MaxCountedTopics topics the table keeps
// its size, a topic busier than the rest stays with at least its true
// count, and a new topic takes the least counted one's place.
func TestTopicCountsBounded(t *testing.T) {
	tc := newTestTopicCounter(t)
	tc.read(time.Now())
	for i := range 5 * MaxCountedTopics {
		tc.count(fmt.Sprintf("dev/%d/t", i))
		if i%4 == 0 {
			tc.count("hot")
		}
	}
	got := tc.snapshot(2*MaxCountedTopics, time.Now())
	if len(got.Topics) != MaxCountedTopics || tc.st.topicsCounted.Load() != MaxCountedTopics {
		t.Fatalf("%d topics counted (gauge %d), want %d", len(got.Topics), tc.st.topicsCounted.Load(), MaxCountedTopics)
	}
	if top := got.Topics[0]; top.Topic != "hot" || top.Messages < 5*MaxCountedTopics/4 {
		t.Fatalf("busiest %+v, want hot with at least %d", top, 5*MaxCountedTopics/4)
	}
	if r := tc.st.topicsReplaced.Load(); r < 3*MaxCountedTopics {
		t.Fatalf("%d replaced, want at least %d", r, 3*MaxCountedTopics)
	}
	last := fmt.Sprintf("dev/%d/t", 5*MaxCountedTopics-1)
	found := false
	for _, c := range got.Topics {
		found = found || c.Topic == last
	}
	if !found {
		t.Fatalf("the newest topic %s is not counted", last)
	}
}

// TestTopicCountsCut: a topic past MaxCountedTopicBytes is counted under
// its start, cut at a character, and the table keeps a copy of the topic,
// not the caller's bytes.
func TestTopicCountsCut(t *testing.T) {
	tc := newTestTopicCounter(t)
	tc.read(time.Now())
	long := strings.Repeat("a", MaxCountedTopicBytes-1) + "é/1"
	tc.count(long)
	tc.count(long[:len(long)-1] + "2")
	buf := []byte("x/1")
	tc.count(unsafe.String(&buf[0], 3)) // a topic in a read buffer, as publishTransient's may be
	copy(buf, "y/2")
	tc.count("x/1")
	got := tc.snapshot(10, time.Now()).Topics
	want := []TopicCount{{strings.Repeat("a", MaxCountedTopicBytes-1) + "…", 2, 0}, {"x/1", 2, 0}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestTopicCountingStops: counting stops once no read came for idle,
// forgetting its counts, not while reads come.
func TestTopicCountingStops(t *testing.T) {
	tc := newTestTopicCounter(t)
	tc.idle = time.Minute
	t0 := time.Now()
	tc.read(t0)
	tc.count("a")
	if tc.idleAt(t0.Add(tc.idle / 2)) {
		t.Fatal("idle half a minute after a read")
	}
	now := t0.Add(2 * tc.idle)
	if !tc.idleAt(now) {
		t.Fatal("not idle two minutes after a read")
	}
	tc.lastRead.Store(now.UnixNano()) // a read between idleAt and stop
	if tc.stop(now) || !tc.on.Load() {
		t.Fatal("stopped just after a read")
	}
	tc.lastRead.Store(t0.UnixNano())
	if !tc.stop(now) || tc.on.Load() {
		t.Fatal("did not stop")
	}
	tc.count("a") // a publish that saw counting on just before
	if got := tc.snapshot(10, time.Now()).Topics; len(got) != 0 {
		t.Fatalf("counts kept after stopping: %+v", got)
	}
}

// BenchmarkPublishTopicCount is a QoS 0 publish to no subscriber from
// parallel publishers (the routing a publish pays before any delivery),
// with counting off (a publish's cost when nobody looks) and on, over
// one topic (every publisher on one shard's lock) and 1,000.
func BenchmarkPublishTopicCount(b *testing.B) {
	for _, counting := range []bool{false, true} {
		for _, n := range []int{1, 1000} {
			name := fmt.Sprintf("off/topics=%d", n)
			if counting {
				name = fmt.Sprintf("on/topics=%d", n)
			}
			b.Run(name, func(b *testing.B) {
				s, err := New(Options{})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { close(s.done) })
				if counting {
					s.busy.read(time.Now())
				}
				topics := make([]string, n)
				for i := range topics {
					topics[i] = fmt.Sprintf("site/%d/temperature", i)
				}
				payload := []byte("21.5")
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						s.publishTransient(topics[i%n], payload, "bench", nil)
						i++
					}
				})
			})
		}
	}
}
