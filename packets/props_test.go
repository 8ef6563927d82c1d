package packets_test

import (
	"bytes"
	"reflect"
	"testing"
	"unsafe"

	"mqttd/packets"
)

// allConnackProps sets every property a CONNACK may carry.
func allConnackProps() packets.Properties {
	p := packets.Properties{
		SessionExpiry: 10, AssignedClientID: "id", ServerKeepAlive: 30, AuthMethod: "m", AuthData: []byte{1},
		ResponseInfo: "ri", ServerReference: "other", ReasonString: "why", ReceiveMaximum: 5,
		TopicAliasMaximum: 7, MaximumQoS: 1, RetainAvailable: 1, MaximumPacketSize: 1 << 20,
		WildcardSubAvailable: 1, SubIDAvailable: 0, SharedSubAvailable: 1,
		User: []packets.UserProperty{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}},
	}
	for id := packets.PropID(0); id < 64; id++ {
		if packets.PropAllowed(id, packets.TypeConnack, false) {
			p.Set(id)
		}
	}
	return p
}

func allPublishProps() packets.Properties {
	p := packets.Properties{
		PayloadFormat: 1, MessageExpiry: 99, ContentType: "ct", ResponseTopic: "rt",
		CorrelationData: []byte("cd"), SubscriptionIDs: []uint32{1, 268_435_455}, TopicAlias: 3,
		User: []packets.UserProperty{{Key: "k", Value: ""}},
	}
	for id := packets.PropID(0); id < 64; id++ {
		if packets.PropAllowed(id, packets.TypePublish, false) {
			p.Set(id)
		}
	}
	return p
}

func TestPropertiesRoundTrip(t *testing.T) {
	will := packets.Properties{PayloadFormat: 0, MessageExpiry: 1, ContentType: "c", ResponseTopic: "r",
		CorrelationData: []byte{0}, WillDelay: 4}
	for id := packets.PropID(0); id < 64; id++ {
		if packets.PropAllowed(id, 0, true) && id != packets.PropUserProperty {
			will.Set(id)
		}
	}
	for _, tc := range []struct {
		name  string
		t     packets.Type
		will  bool
		props packets.Properties
	}{
		{"connack", packets.TypeConnack, false, allConnackProps()},
		{"publish", packets.TypePublish, false, allPublishProps()},
		{"will", packets.TypeConnect, true, will},
		{"empty", packets.TypeSuback, false, packets.Properties{}},
	} {
		b, err := tc.props.Append([]byte{0xAA})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(b)-1 != tc.props.Size() {
			t.Fatalf("%s: Size %d, encoded %d", tc.name, tc.props.Size(), len(b)-1)
		}
		var got packets.Properties
		n, err := got.Decode(b[1:], tc.t, tc.will)
		if err != nil || n != len(b)-1 {
			t.Fatalf("%s: decode consumed %d of %d: %v", tc.name, n, len(b)-1, err)
		}
		if !reflect.DeepEqual(got, tc.props) {
			t.Fatalf("%s: decoded\n%+v\nwant\n%+v", tc.name, got, tc.props)
		}
	}
}

func TestPropertiesEncodeInIdentifierOrder(t *testing.T) {
	var p packets.Properties
	p.User = []packets.UserProperty{{Key: "k", Value: "v"}}
	p.TopicAlias = 2
	p.Set(packets.PropTopicAlias)
	p.PayloadFormat = 1
	p.Set(packets.PropPayloadFormat)
	got, err := p.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0x0C, 0x01, 0x01, 0x23, 0x00, 0x02, 0x26, 0x00, 0x01, 'k', 0x00, 0x01, 'v'}
	if !bytes.Equal(got, want) {
		t.Fatalf("got % X, want % X", got, want)
	}
}

func TestPropAllowed(t *testing.T) {
	for _, tc := range []struct {
		id   packets.PropID
		t    packets.Type
		will bool
		want bool
	}{
		{packets.PropSessionExpiry, packets.TypeConnect, false, true},
		{packets.PropSessionExpiry, packets.TypePublish, false, false},
		{packets.PropSessionExpiry, packets.TypeConnect, true, false},
		{packets.PropWillDelay, packets.TypeConnect, true, true},
		{packets.PropWillDelay, packets.TypeConnect, false, false},
		{packets.PropSubscriptionID, packets.TypeSubscribe, false, true},
		{packets.PropSubscriptionID, packets.TypeUnsubscribe, false, false},
		{packets.PropUserProperty, packets.TypeUnsubscribe, false, true},
		{packets.PropUserProperty, packets.TypePingreq, false, false},
		{packets.PropReasonString, packets.TypeAuth, false, true},
		{packets.PropTopicAlias, packets.TypePublish, false, true},
		{packets.PropMaximumQoS, packets.TypeConnect, false, false},
		{0x7F, packets.TypeConnect, false, false},
		{0, packets.TypeConnect, false, false},
	} {
		if got := packets.PropAllowed(tc.id, tc.t, tc.will); got != tc.want {
			t.Errorf("PropAllowed(%v, %v, %v) = %v", tc.id, tc.t, tc.will, got)
		}
	}
}

func TestPropertyValueRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    packets.Type
		raw  []byte
		code packets.ReasonCode
	}{
		{"maximum QoS 2", packets.TypeConnack, []byte{2, 0x24, 2}, packets.ProtocolError},
		{"retain available 2", packets.TypeConnack, []byte{2, 0x25, 2}, packets.ProtocolError},
		{"request response info 2", packets.TypeConnect, []byte{2, 0x19, 2}, packets.ProtocolError},
		{"session expiry twice", packets.TypeDisconnect, []byte{10, 0x11, 0, 0, 0, 1, 0x11, 0, 0, 0, 1}, packets.ProtocolError},
		{"truncated uint32", packets.TypeDisconnect, []byte{3, 0x11, 0, 0}, packets.MalformedPacket},
		{"subscription id 5 bytes", packets.TypePublish, []byte{6, 0x0B, 0x80, 0x80, 0x80, 0x80, 0x01}, packets.MalformedPacket},
		{"user property bad value", packets.TypeAuth, []byte{7, 0x26, 0, 1, 'k', 0, 1, 0}, packets.MalformedPacket},
		{"identifier 0", packets.TypePuback, []byte{1, 0}, packets.MalformedPacket},
		{"missing length", packets.TypePuback, nil, packets.MalformedPacket},
	} {
		var p packets.Properties
		_, err := p.Decode(tc.raw, tc.t, false)
		t.Run(tc.name, func(t *testing.T) { wantCode(t, err, tc.code) })
	}
}

func TestNames(t *testing.T) {
	if packets.TypePubrel.String() != "PUBREL" || packets.Type(16).String() != "Type(16)" {
		t.Error("Type.String")
	}
	if packets.PropTopicAlias.String() != "Topic Alias" || packets.PropID(0x7F).String() != "property 0x7F" {
		t.Error("PropID.String")
	}
	for ty := packets.Type(0); ty < 17; ty++ {
		want := ty >= packets.TypeConnect && ty <= packets.TypeAuth &&
			ty != packets.TypeConnack && ty != packets.TypeSuback && ty != packets.TypeUnsuback && ty != packets.TypePingresp
		if ty.SentByClient() != want {
			t.Errorf("%v.SentByClient() = %v", ty, !want)
		}
	}
}

func TestValidReasonCode(t *testing.T) {
	for _, tc := range []struct {
		t    packets.Type
		v    packets.Version
		c    packets.ReasonCode
		want bool
	}{
		{packets.TypeConnack, packets.V311, packets.ConnRefusedNotAuthorized, true},
		{packets.TypeConnack, packets.V311, packets.UnsupportedProtocolVersion, false},
		{packets.TypeConnack, packets.V5, packets.UnsupportedProtocolVersion, true},
		{packets.TypeSuback, packets.V311, packets.TopicFilterInvalid, false},
		{packets.TypeSuback, packets.V5, packets.TopicFilterInvalid, true},
		{packets.TypePubrel, packets.V5, packets.PacketIDNotFound, true},
		{packets.TypePuback, packets.V5, packets.PacketIDNotFound, false},
		{packets.TypeDisconnect, packets.V5, packets.SessionTakenOver, true},
		{packets.TypeAuth, packets.V5, packets.ReAuthenticate, true},
		{packets.TypePingreq, packets.V5, packets.Success, false},
	} {
		if got := packets.ValidReasonCode(tc.t, tc.v, tc.c); got != tc.want {
			t.Errorf("ValidReasonCode(%v, %d, 0x%02X) = %v", tc.t, tc.v, byte(tc.c), got)
		}
	}
}

func TestUnknownPresentBitsAreNotEncoded(t *testing.T) {
	p := packets.Properties{User: []packets.UserProperty{{Key: "k", Value: "v"}}}
	p.Set(0x04)
	p.Set(0x3F)
	got, err := p.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0x07, 0x26, 0x00, 0x01, 'k', 0x00, 0x01, 'v'}
	if !bytes.Equal(got, want) || p.Size() != len(want) {
		t.Fatalf("got % X (Size %d), want % X", got, p.Size(), want)
	}
}

// TestPropertiesClone checks a clone shares no memory with the decoded
// properties, whose strings and slices alias the frame.
func TestPropertiesClone(t *testing.T) {
	frame := []byte("content/typeresponse/topiccorrkeyvalue")
	s := string(frame) // one backing array for every field, as a frame is
	p := packets.Properties{ContentType: s[:12], ResponseTopic: s[12:26], CorrelationData: frame[26:30],
		User: []packets.UserProperty{{Key: s[30:33], Value: s[33:]}}, SubscriptionIDs: []uint32{7}}
	c := p.Clone()
	if c.ContentType != p.ContentType || c.ResponseTopic != p.ResponseTopic || string(c.CorrelationData) != "corr" ||
		c.User[0] != p.User[0] || c.SubscriptionIDs[0] != 7 {
		t.Fatalf("clone %+v differs from %+v", c, p)
	}
	shared := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	if shared(c.ContentType, p.ContentType) || shared(c.ResponseTopic, p.ResponseTopic) ||
		&c.CorrelationData[0] == &p.CorrelationData[0] || &c.User[0] == &p.User[0] ||
		shared(c.User[0].Key, p.User[0].Key) || shared(c.User[0].Value, p.User[0].Value) ||
		&c.SubscriptionIDs[0] == &p.SubscriptionIDs[0] {
		t.Error("the clone shares memory with the original")
	}
}
