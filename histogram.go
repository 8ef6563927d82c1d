package mqttd

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// histogram counts observations into fixed buckets without a lock, for
// the collector to export as a Prometheus histogram when scraped. It is
// fed where something already costs far more than an atomic add (a store
// commit), never per message, and its zero value is ready, so stats
// holds it by value. Its sum is kept by whoever feeds it, in a counter
// the broker has anyway.
type histogram struct {
	// counts are per bucket of the bounds observe is given, the last for
	// values above every bound.
	counts [histogramBounds + 1]atomic.Uint64
}

// histogramBounds is the number of bounds of every histogram.
const histogramBounds = 16

// observe counts v in the first bucket whose bound (of bounds, increasing)
// is at least v.
func (h *histogram) observe(bounds *[histogramBounds]float64, v float64) {
	i := 0
	for i < len(bounds) && v > bounds[i] {
		i++
	}
	h.counts[i].Add(1)
}

// metric is the histogram as a Prometheus constant metric: cumulative
// bucket counts and, as its count, their total, so that the two agree
// however observations interleave with the scrape.
func (h *histogram) metric(d *prometheus.Desc, bounds *[histogramBounds]float64, sum float64) prometheus.Metric {
	buckets := make(map[float64]uint64, len(bounds))
	var total uint64
	for i := range h.counts {
		total += h.counts[i].Load()
		if i < len(bounds) {
			buckets[bounds[i]] = total
		}
	}
	return prometheus.MustNewConstHistogram(d, total, sum, buckets)
}

// Bounds of the store's histograms: a commit's duration in seconds (an
// fsync on an SD card takes tens of milliseconds), and its operations,
// which group commit makes many when the disk is slow.
var (
	storeCommitSecondsBounds = [histogramBounds]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	storeCommitOpsBounds     = [histogramBounds]float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768}
)
