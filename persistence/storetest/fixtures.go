package storetest

import (
	"fmt"
	"time"

	"mqttd/packets"
	"mqttd/persistence"
)

func session(id string) persistence.Session {
	return persistence.Session{ID: id, Username: "user-" + id, Version: 5, Expiry: 3600}
}

func message(id uint64, topic string) *persistence.Message {
	return &persistence.Message{
		ID:      id,
		Topic:   topic,
		Payload: fmt.Appendf(nil, "payload %d", id),
		QoS:     1,
		Origin:  "publisher",
	}
}

func outbound(seq, msg uint64) persistence.Outbound {
	return persistence.Outbound{Seq: seq, MessageID: msg, QoS: 1}
}

// publishProperties are properties a 5.0 PUBLISH forwards, all set to
// something a lossy encoding would not give back.
func publishProperties() packets.Properties {
	var p packets.Properties
	p.Set(packets.PropPayloadFormat)
	p.PayloadFormat = 1
	p.Set(packets.PropMessageExpiry)
	p.MessageExpiry = 86400
	p.Set(packets.PropContentType)
	p.ContentType = "application/json; charset=utf-8"
	p.Set(packets.PropResponseTopic)
	p.ResponseTopic = "replies/ünïcode/😀"
	p.Set(packets.PropCorrelationData)
	p.CorrelationData = []byte{0, 1, 0xfe, 0xff, 0}
	p.Set(packets.PropUserProperty)
	// Order and repeated keys are meaningful [MQTT-3.3.2-18].
	p.User = []packets.UserProperty{
		{Key: "k", Value: "v1"},
		{Key: "ключ", Value: "值"},
		{Key: "k", Value: "v2"},
		{Key: "", Value: ""},
	}
	return p
}

// richMessage sets every field of a Message.
func richMessage(id uint64) *persistence.Message {
	payload := make([]byte, 256)
	for i := range payload {
		payload[i] = byte(i)
	}
	return &persistence.Message{
		ID:         id,
		Topic:      "sensors/ünïcode/😀/temp",
		Payload:    payload,
		QoS:        2,
		Retain:     true,
		Properties: publishProperties(),
		Expiry:     time.Date(2031, 7, 1, 12, 30, 0, 123456789, time.UTC).UnixNano(),
		Origin:     "publisher/ü-1",
	}
}

func messages(ms ...*persistence.Message) map[uint64]*persistence.Message {
	m := make(map[uint64]*persistence.Message, len(ms))
	for _, msg := range ms {
		m[msg.ID] = msg
	}
	return m
}

// snap is the Snapshot expected to hold these; nil maps are empty.
func snap(retained map[string]uint64, msgs map[uint64]*persistence.Message, sessions ...persistence.SessionState) *persistence.Snapshot {
	if retained == nil {
		retained = map[string]uint64{}
	}
	if msgs == nil {
		msgs = map[uint64]*persistence.Message{}
	}
	return &persistence.Snapshot{Sessions: sessions, Retained: retained, Messages: msgs}
}

// bare is the state of a session that holds nothing.
func bare(s persistence.Session) persistence.SessionState {
	return persistence.SessionState{Session: s}
}
