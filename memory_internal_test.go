package mqttd

import (
	"runtime/metrics"
	"testing"
)

// TestLiveHeapBeforeFirstCollection: the live heap the memory watch
// reports is the last collection's, or, before any collection, the
// heap's objects, which the runtime reads as uint64 under these names.
func TestLiveHeapBeforeFirstCollection(t *testing.T) {
	if got := liveHeap(0, 5<<20); got != 5<<20 {
		t.Errorf("before the first collection: %d, want the heap's objects", got)
	}
	if got := liveHeap(3<<20, 5<<20); got != 3<<20 {
		t.Errorf("after a collection: %d, want the live heap", got)
	}
	kinds := map[string]metrics.ValueKind{}
	for _, d := range metrics.All() {
		kinds[d.Name] = d.Kind
	}
	for _, name := range []string{liveHeapMetric, heapObjectsMetric} {
		if kinds[name] != metrics.KindUint64 {
			t.Errorf("runtime metric %s: kind %v, want uint64", name, kinds[name])
		}
	}
}
