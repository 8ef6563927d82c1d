package bolt

import (
	"encoding/binary"
	"fmt"

	"mqttd/persistence"
)

// A log record is a batch: its operations one after another, each its
// kind byte and then its fields, records in the formats of codec.go:
//
//	PutMessage          uvarint ID, str message record
//	PutSession          str ID, str session record
//	DeleteSession       str ID
//	PutSubscription     str session, str filter, str subscription record
//	DeleteSubscription  str session, str filter
//	PutOutbound         str session, uvarint Seq, str outbound record
//	DeleteOutbound      str session, uvarint Seq
//	PutAwaitingRel      str session, uvarint packet id
//	DeleteAwaitingRel   str session, uvarint packet id
//	PutRetained         str topic, uvarint message ID
//	DeleteRetained      str topic
//	PutWill             str session, str will record
//	DeleteWill          str session

// appendOp encodes op onto dst; its records are checked as the applier
// checks them.
func appendOp(dst []byte, op *persistence.Op) ([]byte, error) {
	dst = append(dst, byte(op.Kind))
	switch op.Kind {
	case persistence.OpPutMessage:
		dst = binary.AppendUvarint(dst, op.Message.ID)
		return appendRecord(dst, func(b []byte) ([]byte, error) {
			return appendMessage(append(b, recV1), op.Message)
		})
	case persistence.OpPutSession:
		dst = appendString(dst, op.Session.ID)
		return appendString(dst, string(encodeSession(&op.Session))), nil
	case persistence.OpPutRetained:
		dst = appendString(dst, op.Topic)
		return binary.AppendUvarint(dst, op.MessageID), nil
	case persistence.OpDeleteRetained:
		return appendString(dst, op.Topic), nil
	}
	dst = appendString(dst, op.SessionID)
	switch op.Kind {
	case persistence.OpPutSubscription:
		v, err := encodeSubscription(&op.Subscription)
		if err != nil {
			return nil, err
		}
		dst = appendString(dst, op.Subscription.Filter)
		return appendString(dst, string(v)), nil
	case persistence.OpDeleteSubscription:
		return appendString(dst, op.Filter), nil
	case persistence.OpPutOutbound:
		v, err := encodeOutbound(&op.Outbound)
		if err != nil {
			return nil, err
		}
		dst = binary.AppendUvarint(dst, op.Outbound.Seq)
		return appendString(dst, string(v)), nil
	case persistence.OpDeleteOutbound:
		return binary.AppendUvarint(dst, op.Seq), nil
	case persistence.OpPutAwaitingRel, persistence.OpDeleteAwaitingRel:
		return binary.AppendUvarint(dst, uint64(op.PacketID)), nil
	case persistence.OpPutWill:
		return appendRecord(dst, func(b []byte) ([]byte, error) { return appendWill(b, op.Will) })
	}
	return dst, nil // DeleteSession, DeleteWill
}

// appendRecord appends what enc writes, preceded by its length, without
// a copy of it: the length is written at its largest and the record
// moved back when it is shorter.
func appendRecord(dst []byte, enc func([]byte) ([]byte, error)) ([]byte, error) {
	at := len(dst)
	dst = append(dst, make([]byte, binary.MaxVarintLen64)...)
	out, err := enc(dst)
	if err != nil {
		return nil, err
	}
	n := len(out) - at - binary.MaxVarintLen64
	w := binary.PutUvarint(out[at:], uint64(n))
	copy(out[at+w:], out[at+binary.MaxVarintLen64:])
	return out[:at+w+n], nil
}

// walOp is one decoded operation of a record. A PutMessage is only its
// message's id and raw record, as the messages bucket keeps it: the
// applier need not decode it to encode it again.
type walOp struct {
	op  persistence.Op
	id  uint64
	raw []byte
}

// eachOp decodes a record's operations one at a time into one walOp,
// calling fn with each. Their records share rec. skip, if not nil, is
// asked before each operation whether to pass over it: it is then read
// past, not decoded.
func eachOp(rec []byte, skip func() bool, fn func(w *walOp) error) error {
	r := reader{b: rec}
	var w walOp
	var o opScan
	for len(r.b) > 0 {
		if skip != nil && skip() {
			if err := scanOp(&r, &o); err != nil {
				return err
			}
			continue
		}
		w = walOp{}
		op := &w.op
		op.Kind = persistence.OpKind(r.byte())
		switch op.Kind {
		case persistence.OpPutMessage:
			// Checked when it was encoded, and by the record's CRC since.
			w.id = r.uvarint()
			w.raw = r.bytes()
		case persistence.OpPutSession:
			op.SessionID = r.string()
			s, err := decodeSession(op.SessionID, r.bytes())
			if err != nil {
				return err
			}
			op.Session = s
		case persistence.OpPutRetained:
			op.Topic = r.string()
			op.MessageID = r.uvarint()
		case persistence.OpDeleteRetained:
			op.Topic = r.string()
		case persistence.OpDeleteSession, persistence.OpDeleteWill:
			op.SessionID = r.string()
		case persistence.OpPutSubscription:
			op.SessionID = r.string()
			f := r.string()
			s, err := decodeSubscription(f, r.bytes())
			if err != nil {
				return err
			}
			op.Subscription = s
		case persistence.OpDeleteSubscription:
			op.SessionID = r.string()
			op.Filter = r.string()
		case persistence.OpPutOutbound:
			op.SessionID = r.string()
			seq := r.uvarint()
			o, err := decodeOutbound(seq, r.bytes())
			if err != nil {
				return err
			}
			op.Outbound = o
		case persistence.OpDeleteOutbound:
			op.SessionID = r.string()
			op.Seq = r.uvarint()
		case persistence.OpPutAwaitingRel, persistence.OpDeleteAwaitingRel:
			op.SessionID = r.string()
			op.PacketID = uint16(r.uvarint())
		case persistence.OpPutWill:
			op.SessionID = r.string()
			w, err := decodeWill(r.bytes())
			if err != nil {
				return err
			}
			op.Will = w
		default:
			return fmt.Errorf("%w: operation kind %d", errRecord, op.Kind)
		}
		if r.err != nil {
			return r.err
		}
		if err := fn(&w); err != nil {
			return err
		}
	}
	return nil
}
