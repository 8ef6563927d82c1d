package main

import (
	"fmt"
	"strconv"
	"strings"
)

// result is one scenario's outcome: ordered key=value pairs printed as a
// single machine-readable line.
type result struct {
	keys   []string
	values []string
	nums   map[string]float64
}

func newResult(scenario string) *result {
	r := &result{nums: map[string]float64{}}
	r.keys = append(r.keys, "scenario")
	r.values = append(r.values, scenario)
	return r
}

// int adds an integer field.
func (r *result) int(key string, v int64) *result {
	r.nums[key] = float64(v)
	return r.add(key, strconv.FormatInt(v, 10))
}

// float adds a number rounded to two decimals.
func (r *result) float(key string, v float64) *result {
	r.nums[key] = v
	return r.add(key, strconv.FormatFloat(v, 'f', 2, 64))
}

func (r *result) add(key, v string) *result {
	r.keys = append(r.keys, key)
	r.values = append(r.values, v)
	return r
}

// num returns a numeric field and whether it exists.
func (r *result) num(key string) (float64, bool) {
	v, ok := r.nums[key]
	return v, ok
}

func (r *result) String() string {
	var b strings.Builder
	for i, k := range r.keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", k, r.values[i])
	}
	return b.String()
}

// lossPct is the share of expected deliveries that did not arrive.
func lossPct(expected, delivered int64) float64 {
	if expected == 0 {
		return 0
	}
	return float64(expected-delivered) * 100 / float64(expected)
}
