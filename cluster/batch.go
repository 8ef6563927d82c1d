package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"github.com/nats-io/nats.go"

	"mqttd/packets"
	"mqttd/persistence"
)

// Messages between nodes travel in batches: the sending goroutine
// appends each message's record to a buffer per destination node and
// publishes a buffer as one NATS message on that node's subject
// (batchSubject) when it reaches batchMax, or when the outgoing queue is
// empty: no timer, so a lone message leaves at once. One sending
// goroutine and one subject per destination keep each topic's order.
//
// A batch is a version byte, then records: a flags byte (QoS in bits 0-1,
// retain in bit 2, stamped in bit 3), the stamp when stamped (node and
// seq, 8 bytes each, big-endian), then, each a uvarint length and its
// bytes, the topic, the publisher's client id (for No Local), the 5.0
// properties as a PUBLISH encodes them (no length prefix of their own;
// empty: none), and the payload.

// batchVersion is a batch's first byte; a node refuses another.
const batchVersion = 1

// batchMax is the size past which a batch is sent before it grows: one
// NATS message of at most about this much, well under NATS's default
// max_payload of 1 MiB. A record larger goes alone.
const batchMax = 48 << 10

// Record flags. Bits 0-1 are the QoS.
const (
	recRetain  = 1 << 2
	recStamped = 1 << 3
)

// errBatch is what every malformed batch decodes to.
var errBatch = errors.New("cluster: malformed batch")

// appendRecord appends m's record to b.
func appendRecord(b []byte, m *Message) ([]byte, error) {
	if m.QoS > 2 {
		return b, fmt.Errorf("cluster: QoS %d", m.QoS)
	}
	flags := m.QoS
	if m.Retain {
		flags |= recRetain
	}
	if !m.Stamp.IsZero() {
		flags |= recStamped
	}
	b = append(b, flags)
	if flags&recStamped != 0 {
		b = binary.BigEndian.AppendUint64(b, m.Stamp.Node)
		b = binary.BigEndian.AppendUint64(b, m.Stamp.Seq)
	}
	b = appendField(b, m.Topic)
	b = appendField(b, m.Origin)
	var err error
	if b, err = appendProps(b, m.Properties); err != nil {
		return b, err
	}
	b = binary.AppendUvarint(b, uint64(len(m.Payload)))
	return append(b, m.Payload...), nil
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendProps appends the properties of p that travel, length first.
func appendProps(b []byte, p *packets.Properties) ([]byte, error) {
	if p == nil {
		return append(b, 0), nil
	}
	q := *p
	q.Present &= publishProps
	q.SubscriptionIDs = nil
	if q.Size() <= 1 {
		return append(b, 0), nil
	}
	raw, err := q.Append(nil)
	if err != nil {
		return b, err
	}
	b = binary.AppendUvarint(b, uint64(len(raw)))
	return append(b, raw...), nil
}

// countBatch checks a batch's framing, from the network, and returns
// its number of records: each record's lengths within the batch. It
// never panics.
func countBatch(data []byte) (int, error) {
	if len(data) < 2 || data[0] != batchVersion {
		return 0, errBatch
	}
	count := 0
	for b := data[1:]; len(b) > 0; count++ {
		if b[0]&recStamped != 0 {
			if len(b) < 17 {
				return 0, errBatch
			}
			b = b[16:]
		}
		b = b[1:]
		for range 4 {
			var ok bool
			if _, b, ok = cutBytes(b); !ok {
				return 0, errBatch
			}
		}
	}
	return count, nil
}

// decodeBatch parses a batch from the network into its messages, one
// slice. Their topics and payloads share data's memory (which nats.go
// allocates for each NATS message, and nothing changes); their origins
// are strings of their own. Every error is errBatch; it never panics.
func decodeBatch(data []byte) ([]Message, error) {
	count, err := countBatch(data)
	if err != nil {
		return nil, err
	}
	return decodeCounted(data, count, nil)
}

// maxReusedRecords bounds the delivery goroutine's decoding slice kept
// between batches (Node.decoded): a batch of more records, tiny ones
// from a peer, gets a slice of its own that goes with it.
const maxReusedRecords = 4096

// decodeCounted is decodeBatch for a batch whose framing countBatch
// checked: count records, decoded into ms's room when it has enough (a
// slice reused from batch to batch: a batch's messages are garbage once
// delivered, and a new slice for each cost more than the batch).
func decodeCounted(data []byte, count int, ms []Message) ([]Message, error) {
	var err error
	if cap(ms) < count {
		ms = make([]Message, count)
	}
	ms = ms[:count]
	b := data[1:]
	origin := ""
	for i := range ms {
		if b, err = decodeRecord(b, &ms[i], origin); err != nil {
			return nil, err
		}
		origin = ms[i].Origin
	}
	return ms, nil
}

// decodeRecord parses one record off b, framed as countBatch checked,
// into m; origin is the previous record's, whose string m shares when
// its origin is the same (a publisher's messages come in runs).
func decodeRecord(b []byte, m *Message, origin string) ([]byte, error) {
	flags := b[0]
	if flags&^15 != 0 || flags&3 == 3 {
		return nil, errBatch
	}
	b = b[1:]
	m.Stamp = persistence.Stamp{}
	if flags&recStamped != 0 {
		m.Stamp = persistence.Stamp{Node: binary.BigEndian.Uint64(b), Seq: binary.BigEndian.Uint64(b[8:])}
		if m.Stamp.IsZero() || flags&3 != 2 {
			return nil, errBatch
		}
		b = b[16:]
	}
	topic, b, _ := cutBytes(b)
	from, b, _ := cutBytes(b)
	raw, b, _ := cutBytes(b)
	payload, b, _ := cutBytes(b)
	if len(topic) == 0 || len(from) > 65535 {
		return nil, errBatch
	}
	m.Topic, m.QoS, m.Retain = unsafe.String(&topic[0], len(topic)), flags&3, flags&recRetain != 0
	if !validTopic(m.Topic) {
		return nil, errBatch
	}
	if string(from) == origin {
		m.Origin = origin
	} else if m.Origin = string(from); !packets.ValidUTF8String(m.Origin) {
		return nil, errBatch
	}
	if len(payload) > 0 {
		m.Payload = payload[:len(payload):len(payload)]
	}
	if len(raw) > 0 {
		// Properties keep slices of what they decode: a copy of their
		// own, not the batch.
		raw = append([]byte(nil), raw...)
		p := new(packets.Properties)
		n, err := p.Decode(raw, packets.TypePublish, false)
		// No properties travel as a length of 0 (appendProps): an empty
		// set spelt out is not what a node sends.
		if err != nil || n != len(raw) || p.Present&noTravel != 0 || len(p.SubscriptionIDs) > 0 || p.Size() <= 1 {
			return nil, errBatch
		}
		m.Properties = p
	}
	return b, nil
}

// inBatch is a batch waiting for the delivery goroutine.
type inBatch struct {
	data  []byte
	count int
	// reply and ack, for a batch to confirm: where and what to answer.
	reply string
	ack   uint64
}

// onBatch takes a batch another node sent this one, on nats.go's
// goroutine of the batch subscription: it checks its framing and
// queues it for the delivery goroutine, which decodes it, or drops it,
// counted, when it would take the queue past InQueueBytes or inBatches
// (the node paused the others long before). It never blocks.
func (n *Node) onBatch(msg *nats.Msg) {
	count, err := countBatch(msg.Data)
	if err != nil {
		n.stats.malformed.Add(1)
		n.warnMalformed(err, msg.Subject)
		return
	}
	n.stats.batchesIn.Add(1)
	size := int64(len(msg.Data))
	if n.inBytes.Add(size) > InQueueBytes {
		n.dropBatch(size, count)
		return
	}
	n.inMsgs.Add(int64(count))
	b := inBatch{data: msg.Data, count: count}
	if v := msg.Header.Get(hdrAck); v != "" && msg.Reply != "" {
		if b.ack, err = strconv.ParseUint(v, 10, 64); err != nil {
			n.stats.malformed.Add(1)
			n.warnMalformed(err, msg.Subject)
			n.inMsgs.Add(-int64(count))
			n.inBytes.Add(-size)
			return
		}
		b.reply = msg.Reply
	}
	select {
	case n.batches <- b:
	default:
		n.inMsgs.Add(-int64(count))
		n.dropBatch(size, count)
	}
}

func (n *Node) dropBatch(size int64, count int) {
	n.inBytes.Add(-size)
	n.stats.droppedIn.Add(uint64(count))
	if n.warn.allow() {
		n.log.Warn().Int("messages", count).Uint64("dropped_in", n.stats.droppedIn.Load()).
			Msg("cluster: delivery behind by InQueueBytes, a batch from another node dropped")
	}
}

// deliverBatch decodes a batch and delivers its messages, counting each
// off the queue as it goes; a malformed one is dropped whole.
func (n *Node) deliverBatch(b inBatch) {
	defer n.inBytes.Add(-int64(len(b.data)))
	ms, err := decodeCounted(b.data, b.count, n.decoded)
	if err != nil {
		clear(n.decoded[:cap(n.decoded)]) // what it decoded before the error
		n.inMsgs.Add(-int64(b.count))
		n.stats.malformed.Add(1)
		n.warnMalformed(err, "")
		return
	}
	n.stats.in.Add(uint64(len(ms)))
	if b.reply != "" && n.delivering != nil {
		n.delivering()
	}
	for i := range ms {
		n.deliver(&ms[i])
		n.inMsgs.Add(-1)
	}
	if b.reply != "" {
		n.answerBatch(b.reply, b.ack)
	}
	// The messages point into the batch: cleared, so that the slice kept
	// does not hold it.
	clear(ms)
	if cap(ms) <= maxReusedRecords {
		n.decoded = ms[:0]
	}
}

// warnMalformed logs, rate-limited, a message from NATS no node sends.
func (n *Node) warnMalformed(err error, subject string) {
	if n.warn.allow() {
		n.log.Warn().Err(err).Str("subject", truncate(subject, 200)).
			Uint64("malformed", n.stats.malformed.Load()+n.routes.malformed.Load()).
			Msg("cluster: malformed message from NATS dropped")
	}
}
