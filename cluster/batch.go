package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"mqttd/packets"
)

// Messages between nodes travel in batches: the sending goroutine
// appends each message's record to a buffer per destination node and
// publishes a buffer as one NATS message on that node's subject
// (batchSubject) when it reaches batchMax, or when the outgoing queue is
// empty: no timer, so a lone message leaves at once. One sending
// goroutine and one subject per destination keep each topic's order.
//
// A batch is a version byte, then records: a flags byte (QoS in bits 0-1,
// retain in bit 2), then, each a uvarint length and its bytes, the
// topic, the publisher's client id (for No Local), the 5.0 properties as
// a PUBLISH encodes them (no length prefix of their own; empty: none),
// and the payload.

// batchVersion is a batch's first byte; a node refuses another.
const batchVersion = 1

// batchMax is the size past which a batch is sent before it grows: one
// NATS message of at most about this much, well under NATS's default
// max_payload of 1 MiB. A record larger goes alone.
const batchMax = 48 << 10

// errBatch is what every malformed batch decodes to.
var errBatch = errors.New("cluster: malformed batch")

// appendRecord appends m's record to b.
func appendRecord(b []byte, m *Message) ([]byte, error) {
	if m.QoS > 2 {
		return b, fmt.Errorf("cluster: QoS %d", m.QoS)
	}
	flags := m.QoS
	if m.Retain {
		flags |= 4
	}
	b = append(b, flags)
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

// decodeBatch parses a batch from the network into its messages, which
// share no memory with data. Every error is errBatch; it never panics.
func decodeBatch(data []byte) ([]*Message, error) {
	if len(data) < 1 || data[0] != batchVersion {
		return nil, errBatch
	}
	b := data[1:]
	var ms []*Message
	for len(b) > 0 {
		m, rest, err := decodeRecord(b)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
		b = rest
	}
	if len(ms) == 0 {
		return nil, errBatch
	}
	return ms, nil
}

// decodeRecord parses one record off b.
func decodeRecord(b []byte) (*Message, []byte, error) {
	flags := b[0]
	if flags&^7 != 0 || flags&3 == 3 {
		return nil, nil, errBatch
	}
	topic, b, ok := cutBytes(b[1:])
	if !ok || !validTopic(string(topic)) {
		return nil, nil, errBatch
	}
	origin, b, ok := cutBytes(b)
	if !ok || len(origin) > 65535 || !packets.ValidUTF8String(string(origin)) {
		return nil, nil, errBatch
	}
	raw, b, ok := cutBytes(b)
	if !ok {
		return nil, nil, errBatch
	}
	payload, b, ok := cutBytes(b)
	if !ok {
		return nil, nil, errBatch
	}
	m := &Message{Topic: string(topic), Origin: string(origin), QoS: flags & 3, Retain: flags&4 != 0}
	if len(payload) > 0 {
		m.Payload = append([]byte(nil), payload...)
	}
	if len(raw) > 0 {
		p := new(packets.Properties)
		n, err := p.Decode(raw, packets.TypePublish, false)
		if err != nil || n != len(raw) || p.Present&noTravel != 0 || len(p.SubscriptionIDs) > 0 {
			return nil, nil, errBatch
		}
		if p.Size() > 1 {
			m.Properties = p
		}
	}
	return m, b, nil
}

// onBatch takes a batch another node sent this one, on nats.go's
// goroutine of the batch subscription: it decodes it there, and queues
// its messages for the delivery goroutine, or drops them all, counted,
// when they would take the queue past InQueueMessages.
func (n *Node) onBatch(msg *nats.Msg) {
	ms, err := decodeBatch(msg.Data)
	if err != nil {
		n.stats.malformed.Add(1)
		n.warnMalformed(err, msg.Subject)
		return
	}
	n.stats.batchesIn.Add(1)
	if n.inMsgs.Add(int64(len(ms))) > InQueueMessages {
		n.inMsgs.Add(-int64(len(ms)))
		n.stats.droppedIn.Add(uint64(len(ms)))
		if n.warn.allow() {
			n.log.Warn().Int("messages", len(ms)).Msg("cluster: delivery behind by InQueueMessages, a batch from another node dropped")
		}
		return
	}
	select {
	case n.batches <- ms:
	case <-n.stopIn:
		n.inMsgs.Add(-int64(len(ms)))
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
