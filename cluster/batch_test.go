package cluster

import (
	"fmt"
	"testing"

	"mqttd/persistence"
)

// testBatch returns a batch of count records on topics t/0, t/1, ...,
// each with its index as payload, all from origin; and a node whose
// deliver appends what it gets to *got (topic and payload).
func testBatch(t *testing.T, count int, origin string) (inBatch, *Node, *[]string) {
	t.Helper()
	data := []byte{batchVersion}
	for i := range count {
		var err error
		data, err = appendRecord(data, &Message{Topic: fmt.Sprintf("t/%d", i), Payload: fmt.Appendf(nil, "%d", i), Origin: origin})
		if err != nil {
			t.Fatal(err)
		}
	}
	got := new([]string)
	n := &Node{log: testLogger(t), deliver: func(m *Message) { *got = append(*got, m.Topic+"="+string(m.Payload)) }}
	return inBatch{data: data, count: count}, n, got
}

// cleared fails t unless every message in ms's room is zero: the slice
// the node keeps holds no batch.
func cleared(t *testing.T, ms []Message) {
	t.Helper()
	for i, m := range ms[:cap(ms)] {
		if m.Topic != "" || m.Payload != nil || m.Origin != "" || m.Properties != nil {
			t.Fatalf("message %d of the kept slice still holds %q", i, m.Topic)
		}
	}
}

// TestDeliverBatchReusesItsSlice: the delivery goroutine decodes each
// batch into the slice the one before used, allocating nothing per batch
// of messages that carry no properties nor a new origin, and keeps it
// cleared between batches.
func TestDeliverBatchReusesItsSlice(t *testing.T) {
	b, n, got := testBatch(t, 3, "")
	n.deliverBatch(b)
	if want := []string{"t/0=0", "t/1=1", "t/2=2"}; fmt.Sprint(*got) != fmt.Sprint(want) {
		t.Fatalf("delivered %q, want %q", *got, want)
	}
	if n.stats.in.Load() != 3 || n.inMsgs.Load() != -3 {
		t.Fatalf("in %d, queued %d: each message counted in once and off the queue once", n.stats.in.Load(), n.inMsgs.Load())
	}
	if cap(n.decoded) < 3 {
		t.Fatalf("the decoding slice (cap %d) was not kept", cap(n.decoded))
	}
	cleared(t, n.decoded)
	n.deliver = func(*Message) {}
	if allocs := testing.AllocsPerRun(20, func() { n.deliverBatch(b) }); allocs != 0 {
		t.Fatalf("%v allocations per batch, want 0", allocs)
	}
}

// TestDeliverBatchMalformedClears: a batch whose second record is bad
// delivers nothing, and what its first decoded into the kept slice is
// cleared.
func TestDeliverBatchMalformedClears(t *testing.T) {
	b, n, got := testBatch(t, 2, "o")
	n.deliverBatch(b) // a slice of 2 kept
	*got = nil
	one, _, _ := testBatch(t, 1, "o")
	bad := append(one.data, 0, 1, '+', 0, 0, 0) // a wildcard topic
	n.deliverBatch(inBatch{data: bad, count: 2})
	if len(*got) != 0 || n.stats.malformed.Load() != 1 {
		t.Fatalf("delivered %q, malformed %d: the batch is dropped whole", *got, n.stats.malformed.Load())
	}
	cleared(t, n.decoded)
}

// TestDeliverBatchSliceBounded: a batch of more than maxReusedRecords
// records is delivered, and its slice is not kept.
func TestDeliverBatchSliceBounded(t *testing.T) {
	b, n, got := testBatch(t, maxReusedRecords+1, "o")
	n.deliverBatch(b)
	if len(*got) != maxReusedRecords+1 {
		t.Fatalf("delivered %d of %d", len(*got), maxReusedRecords+1)
	}
	if cap(n.decoded) > maxReusedRecords {
		t.Fatalf("kept a slice of %d messages, bound %d", cap(n.decoded), maxReusedRecords)
	}
}

// TestBatchStamp: a QoS 2 message's stamp travels in its record; another
// message in the batch has none, and a stamp on anything but QoS 2 is
// refused.
func TestBatchStamp(t *testing.T) {
	st := persistence.Stamp{Node: 1 << 60, Seq: 42}
	b, err := appendRecord([]byte{batchVersion}, &Message{Topic: "a", QoS: 2, Stamp: st, Origin: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if b, err = appendRecord(b, &Message{Topic: "b", QoS: 2}); err != nil {
		t.Fatal(err)
	}
	ms, err := decodeBatch(b)
	if err != nil || len(ms) != 2 || ms[0].Stamp != st || !ms[1].Stamp.IsZero() || ms[0].Origin != "p" {
		t.Fatalf("decoded %+v (%v)", ms, err)
	}
	bad, _ := appendRecord([]byte{batchVersion}, &Message{Topic: "a", QoS: 1, Stamp: st})
	if _, err := decodeBatch(bad); err != errBatch {
		t.Fatalf("a stamped QoS 1 record decoded: %v", err)
	}
}
