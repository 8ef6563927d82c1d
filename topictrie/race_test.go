package topictrie

import (
	"fmt"
	"sync"
	"testing"
)

// TestConcurrentTrie churns subscriptions from several writers while readers
// match: the stable subscriptions must be matched every time, exactly once
// each, and the churning ones must be gone at the end.
func TestConcurrentTrie(t *testing.T) {
	const writers, readers, iters = 4, 4, 2000
	tr := New[string, int](Options{})
	stable := []string{"s/+/c", "s/#", "$share/g/s/b/c"}
	for _, f := range stable {
		mustSub(t, tr, f, "stable", 0, true)
	}
	var wg sync.WaitGroup
	errs := make(chan string, readers)
	for w := range writers {
		wg.Go(func() {
			key := fmt.Sprint("w", w)
			for i := range iters {
				filters := []string{"s/b/c", "s/+/+", "s/b/#", "$share/g/s/b/c", fmt.Sprint("s/b/", i%7), "x/+"}
				f := filters[i%len(filters)]
				if _, err := tr.Subscribe(f, key, i); err != nil {
					errs <- err.Error()
					return
				}
				if !tr.Unsubscribe(f, key) {
					errs <- fmt.Sprintf("%s lost its subscription to %s", key, f)
					return
				}
			}
		})
	}
	for range readers {
		wg.Go(func() {
			var buf []Sub[string, int]
			for range iters {
				buf = tr.Match("s/b/c", buf[:0])
				seen := map[string]int{}
				for _, s := range buf {
					if s.Key == "stable" && s.Group == "" {
						seen[s.Filter]++
					}
				}
				if seen["s/+/c"] != 1 || seen["s/#"] != 1 {
					errs <- fmt.Sprintf("stable subscriptions matched %v", seen)
					return
				}
				if groups := countGroups(buf); groups != 1 {
					errs <- fmt.Sprintf("share group delivered %d times", groups)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := tr.Len(); n != len(stable) {
		t.Errorf("Len = %d after churn, want %d", n, len(stable))
	}
}

func countGroups(subs []Sub[string, int]) int {
	n := 0
	for _, s := range subs {
		if s.Group != "" {
			n++
		}
	}
	return n
}

// TestConcurrentRetained sets and deletes topics while readers match: the
// stable topic is always found.
func TestConcurrentRetained(t *testing.T) {
	const writers, readers, iters = 4, 4, 2000
	r := NewRetained[int](Limits{})
	if _, err := r.Set("s/stable/c", -1); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, writers+readers)
	for w := range writers {
		wg.Go(func() {
			for i := range iters {
				topic := fmt.Sprintf("s/w%d/%d", w, i%5)
				if _, err := r.Set(topic, i); err != nil {
					errs <- err.Error()
					return
				}
				if !r.Delete(topic) {
					errs <- "lost " + topic
					return
				}
			}
		})
	}
	for range readers {
		wg.Go(func() {
			var buf []Item[int]
			for i := range iters {
				filter := []string{"s/+/c", "#", "s/#", "+/stable/+"}[i%4]
				buf = r.Match(filter, buf[:0])
				found := 0
				for _, it := range buf {
					if it.Topic == "s/stable/c" {
						found++
					}
				}
				if found != 1 {
					errs <- fmt.Sprintf("%s found the stable topic %d times", filter, found)
					return
				}
				if v, ok := r.Get("s/stable/c"); !ok || v != -1 {
					errs <- "Get lost the stable topic"
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if r.Len() != 1 {
		t.Errorf("Len = %d after churn, want 1", r.Len())
	}
}
