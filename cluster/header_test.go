package cluster

import (
	"reflect"
	"strings"
	"testing"

	"mqttd/packets"
)

func fullProps() *packets.Properties {
	p := &packets.Properties{
		PayloadFormat:   1,
		MessageExpiry:   60,
		ContentType:     "text/plain",
		ResponseTopic:   "reply/here",
		CorrelationData: []byte{0, 1, 2},
		User:            []packets.UserProperty{{Key: "k", Value: "v\r\n;"}, {Key: "k", Value: "again"}},
	}
	for _, id := range []packets.PropID{packets.PropPayloadFormat, packets.PropMessageExpiry,
		packets.PropContentType, packets.PropResponseTopic, packets.PropCorrelationData, packets.PropUserProperty} {
		p.Set(id)
	}
	return p
}

func TestMetaRoundTrip(t *testing.T) {
	sent := fullProps()
	// What belongs to one hop or to no PUBLISH must not travel.
	sent.SubscriptionIDs = []uint32{7}
	sent.TopicAlias = 3
	sent.Set(packets.PropTopicAlias)
	sent.SessionExpiry = 9
	sent.Set(packets.PropSessionExpiry)
	for _, m := range []*Message{
		{QoS: 2, Retain: true, Origin: "client;1\r\nX-Evil: 1", Properties: sent},
		{QoS: 0, Origin: ""},
		{QoS: 1, Origin: "ü", Properties: &packets.Properties{}},
	} {
		v, err := encodeMeta(m)
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(v, "\r\n") {
			t.Fatalf("header value %q has a line break", v)
		}
		var got Message
		if err := decodeMeta(v, &got); err != nil {
			t.Fatalf("decodeMeta(%q): %v", v, err)
		}
		if got.QoS != m.QoS || got.Retain != m.Retain || got.Origin != m.Origin {
			t.Fatalf("got qos %d retain %v origin %q, want %d %v %q", got.QoS, got.Retain, got.Origin, m.QoS, m.Retain, m.Origin)
		}
		if m.Properties == nil || m.Properties.IsZero() {
			if got.Properties != nil {
				t.Fatalf("properties %+v from none", got.Properties)
			}
			continue
		}
		if want := fullProps(); !reflect.DeepEqual(got.Properties, want) {
			t.Fatalf("properties\n got %+v\nwant %+v", got.Properties, want)
		}
	}
	if sent.TopicAlias != 3 || len(sent.SubscriptionIDs) != 1 || !sent.Has(packets.PropTopicAlias) {
		t.Fatal("encodeMeta changed the caller's properties")
	}
}

func TestMetaMalformed(t *testing.T) {
	withAlias, _ := (&packets.Properties{Present: 1 << packets.PropTopicAlias, TopicAlias: 1}).Append(nil)
	withSubID, _ := (&packets.Properties{SubscriptionIDs: []uint32{1}}).Append(nil)
	for _, v := range []string{
		"", "1", "1;00;", "1;00;;;", "2;00;;", "1;30;;", "1;02;;", "1;0;;", "1;000;;", "1;00;!!;",
		"1;00;" + b64.EncodeToString([]byte{0xff}) + ";",  // origin not UTF-8
		"1;00;" + b64.EncodeToString([]byte{0}) + ";",     // origin with NUL
		"1;00;;" + b64.EncodeToString([]byte{5, 1}),       // properties truncated
		"1;00;;" + b64.EncodeToString([]byte{0, 0}),       // bytes after the properties
		"1;00;;" + b64.EncodeToString([]byte{2, 0x11, 0}), // a property no PUBLISH carries
		"1;00;;" + b64.EncodeToString(withAlias),
		"1;00;;" + b64.EncodeToString(withSubID),
		"1;00;;====",
	} {
		var m Message
		if err := decodeMeta(v, &m); err != errMeta {
			t.Errorf("decodeMeta(%q) = %v, want errMeta", v, err)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	for _, m := range []*Message{{QoS: 1, Retain: true, Origin: "c", Properties: fullProps()}, {}} {
		v, err := encodeMeta(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(v)
	}
	f.Add("1;00;;AA")
	f.Add("1;22;;BQEB")
	f.Fuzz(func(t *testing.T, v string) {
		var m Message
		if decodeMeta(v, &m) != nil {
			return
		}
		// What decodes must survive another hop unchanged.
		again, err := encodeMeta(&m)
		if err != nil {
			t.Fatalf("decoded %q does not encode: %v", v, err)
		}
		var m2 Message
		if err := decodeMeta(again, &m2); err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("%q: second hop %+v, %v; first %+v", v, m2, err, m)
		}
	})
}
