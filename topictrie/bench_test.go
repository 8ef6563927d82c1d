package topictrie

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"mqttd/internal/testutil"
)

// subFixture is a trie of n subscriptions, built once and shared by every
// benchmark that needs that size: building a million entries takes seconds.
type subFixture struct {
	once sync.Once
	tr   *Trie[int, opts]
}

var subFixtures = map[int]*subFixture{100_000: {}, 1_000_000: {}}

// subTrie returns the shared trie of n subscriptions: 80% exact filters
// "dev/{a}/{b}/state", 10% "dev/{a}/+/cmd{b}" and 10% "dev/{a}/{b}/#", with a
// spread over 1000 values and b over n/1000.
func subTrie(b *testing.B, n int) *Trie[int, opts] {
	b.Helper()
	f := subFixtures[n]
	f.once.Do(func() {
		f.tr = New[int, opts](Options{})
		for i := range n {
			if _, err := f.tr.Subscribe(benchFilter(i, n), i, opts{QoS: 1, SubID: uint32(i)}); err != nil {
				panic(err)
			}
		}
		// Finish collecting the build's garbage so that GC does not compete
		// with the timed loop for the two cores.
		runtime.GC()
	})
	return f.tr
}

func benchFilter(i, n int) string {
	a, c := strconv.Itoa(i%1000), strconv.Itoa(i/1000)
	switch i % 10 {
	case 8:
		return "dev/" + a + "/+/cmd" + c
	case 9:
		return "dev/" + a + "/" + c + "/#"
	}
	return "dev/" + a + "/" + c + "/state"
}

// benchTopics returns 1024 topics of the given kind, each matching exactly
// one subscription of that kind, or none for "miss".
func benchTopics(n int, kind string) []string {
	topics := make([]string, 0, 1024)
	for i := 0; len(topics) < cap(topics); i += 7919 {
		j := i % n
		a, c := strconv.Itoa(j%1000), strconv.Itoa(j/1000)
		switch {
		case kind == "exact" && j%10 < 8:
			topics = append(topics, "dev/"+a+"/"+c+"/state")
		case kind == "plus" && j%10 == 8:
			topics = append(topics, "dev/"+a+"/x/cmd"+c)
		case kind == "hash" && j%10 == 9:
			topics = append(topics, "dev/"+a+"/"+c+"/state/x")
		case kind == "miss" && j%10 < 8:
			topics = append(topics, "dev/"+a+"/"+c+"/nope")
		}
	}
	return topics
}

func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		for _, kind := range []string{"exact", "plus", "hash", "miss"} {
			b.Run(fmt.Sprintf("%s/subs=%d", kind, n), func(b *testing.B) {
				tr := subTrie(b, n)
				topics := benchTopics(n, kind)
				want := 1
				if kind == "miss" {
					want = 0
				}
				buf := make([]Sub[int, opts], 0, 16)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					buf = tr.Match(topics[i%len(topics)], buf[:0])
					if len(buf) != want {
						b.Fatalf("%q matched %d subscriptions, want %d", topics[i%len(topics)], len(buf), want)
					}
				}
			})
		}
	}
}

// BenchmarkMatchParallel shows how matching scales over cores under the read
// lock.
func BenchmarkMatchParallel(b *testing.B) {
	tr := subTrie(b, 100_000)
	topics := benchTopics(100_000, "exact")
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]Sub[int, opts], 0, 16)
		for i := 0; pb.Next(); i++ {
			buf = tr.Match(topics[i%len(topics)], buf[:0])
		}
	})
}

// BenchmarkMatchShared matches a topic with one normal subscriber and one
// share group of 10 members under each strategy.
func BenchmarkMatchShared(b *testing.B) {
	for _, s := range []Strategy{RoundRobin{}, Random{}, Sticky{}, HashTopic{}} {
		b.Run(fmt.Sprintf("%T", s), func(b *testing.B) {
			tr := New[int, opts](Options{Strategy: s})
			for i := range 10 {
				if _, err := tr.Subscribe("$share/g/a/+/c", i, opts{}); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := tr.Subscribe("a/b/c", 10, opts{}); err != nil {
				b.Fatal(err)
			}
			buf := make([]Sub[int, opts], 0, 4)
			b.ReportAllocs()
			for b.Loop() {
				buf = tr.Match("a/b/c", buf[:0])
			}
		})
	}
}

// BenchmarkSubscribe adds new subscriptions to a trie that already holds
// 100k (its own copy, so the shared fixture is left alone).
func BenchmarkSubscribe(b *testing.B) {
	tr, filters := churnTrie(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tr.Subscribe(filters[i], i, opts{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnsubscribe removes b.N subscriptions from a trie that holds 100k
// others.
func BenchmarkUnsubscribe(b *testing.B) {
	tr, filters := churnTrie(b)
	for i := 0; i < b.N; i++ {
		if _, err := tr.Subscribe(filters[i], i, opts{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !tr.Unsubscribe(filters[i], i) {
			b.Fatal("missing subscription")
		}
	}
}

// churnTrie returns a fresh trie of 100k subscriptions and b.N filters
// outside it, in the same shape.
func churnTrie(b *testing.B) (*Trie[int, opts], []string) {
	b.Helper()
	const base = 100_000
	tr := New[int, opts](Options{})
	for i := range base {
		if _, err := tr.Subscribe(benchFilter(i, base), -i-1, opts{}); err != nil {
			b.Fatal(err)
		}
	}
	filters := make([]string, b.N)
	for i := range filters {
		filters[i] = "new/" + benchFilter(i, b.N)
	}
	return tr, filters
}

// retainedFixture holds 1M retained topics "t{a}/{b}/{c}" with a in 0..99,
// b in 0..999 and c in 0..9, built once.
var retainedFixture struct {
	once sync.Once
	r    *Retained[int]
}

func retained1M(b *testing.B) *Retained[int] {
	b.Helper()
	f := &retainedFixture
	f.once.Do(func() {
		f.r = NewRetained[int](Limits{})
		for i := range 1_000_000 {
			topic := "t" + strconv.Itoa(i/10_000) + "/" + strconv.Itoa(i/10%1000) + "/" + strconv.Itoa(i%10)
			if _, err := f.r.Set(topic, i); err != nil {
				panic(err)
			}
		}
		runtime.GC()
	})
	return f.r
}

func BenchmarkRetainedMatch(b *testing.B) {
	for _, c := range []struct {
		filter string
		want   int
	}{
		{"#", 1_000_000},
		{"t5/+/7", 1000},
		{"t5/42/#", 10},
		{"t5/42/7", 1},
		{"+/42/7", 100},
	} {
		b.Run(fmt.Sprintf("%s/topics=1M", c.filter), func(b *testing.B) {
			r := retained1M(b)
			// Size the buffer outside the timer, as a broker reusing it would.
			buf := r.Match(c.filter, nil)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				buf = r.Match(c.filter, buf[:0])
				if len(buf) != c.want {
					b.Fatalf("%q matched %d topics, want %d", c.filter, len(buf), c.want)
				}
			}
		})
	}
}

func BenchmarkRetainedSetDelete(b *testing.B) {
	r := retained1M(b)
	topics := make([]string, b.N)
	for i := range topics {
		topics[i] = "new/" + strconv.Itoa(i%1000) + "/" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.Set(topics[i], i); err != nil {
			b.Fatal(err)
		}
		r.Delete(topics[i])
	}
}

// BenchmarkMemory reports the heap held per subscription and per retained
// topic, for structures of 100k entries shaped like the other benchmarks.
func BenchmarkMemory(b *testing.B) {
	const n = 100_000
	filters := make([]string, n)
	topics := make([]string, n)
	for i := range n {
		filters[i] = benchFilter(i, n)
		topics[i] = "t" + strconv.Itoa(i/1000) + "/" + strconv.Itoa(i/10%100) + "/" + strconv.Itoa(i%10)
	}
	b.Run("subscriptions", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			before := int64(testutil.HeapInUse())
			tr := New[int, opts](Options{})
			for j, f := range filters {
				if _, err := tr.Subscribe(f, j, opts{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(int64(testutil.HeapInUse())-before)/n, "B/sub")
			runtime.KeepAlive(tr)
		}
	})
	b.Run("retained", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			before := int64(testutil.HeapInUse())
			r := NewRetained[int](Limits{})
			for j, tp := range topics {
				if _, err := r.Set(tp, j); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(int64(testutil.HeapInUse())-before)/n, "B/topic")
			runtime.KeepAlive(r)
		}
	})
}
