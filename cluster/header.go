package cluster

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"mqttd/packets"
)

// metaHeader is the NATS header carrying what MQTT adds to a topic and a
// payload: "1;<qos><retain>;<origin>;<properties>", the origin and the
// 5.0 properties (as the PUBLISH encodes them, length first) in unpadded
// base64url, so that no client id or property can break the header line.
const metaHeader = "Mqttd"

// metaVersion is the first field of the header; a node refuses another.
const metaVersion = "1"

var b64 = base64.RawURLEncoding

// errMeta is what every malformed header decodes to: the message is
// dropped and counted, whatever was wrong with it.
var errMeta = errors.New("cluster: malformed " + metaHeader + " header")

// noTravel are the properties that belong to one hop: the receiving node
// assigns subscription identifiers and topic aliases of its own.
const noTravel = 1<<packets.PropSubscriptionID | 1<<packets.PropTopicAlias

// publishProps is the set of properties a PUBLISH may carry that travel.
var publishProps = func() uint64 {
	var m uint64
	for id := range 64 {
		if packets.PropAllowed(packets.PropID(id), packets.TypePublish, false) {
			m |= 1 << id
		}
	}
	return m &^ noTravel
}()

// encodeMeta returns the header value of m.
func encodeMeta(m *Message) (string, error) {
	if m.QoS > 2 {
		return "", fmt.Errorf("cluster: QoS %d", m.QoS)
	}
	var raw []byte
	if m.Properties != nil {
		p := *m.Properties
		p.Present &= publishProps
		p.SubscriptionIDs = nil
		if p.Size() > 1 {
			var err error
			if raw, err = p.Append(nil); err != nil {
				return "", err
			}
		}
	}
	b := make([]byte, 0, 8+b64.EncodedLen(len(m.Origin))+b64.EncodedLen(len(raw)))
	b = append(b, metaVersion+";"...)
	b = append(b, '0'+m.QoS, '0')
	if m.Retain {
		b[len(b)-1] = '1'
	}
	b = append(b, ';')
	b = b64.AppendEncode(b, []byte(m.Origin))
	b = append(b, ';')
	b = b64.AppendEncode(b, raw)
	return string(b), nil
}

// decodeMeta parses a header value from the network into m's QoS,
// Retain, Origin and Properties. Every error is errMeta; it never panics,
// and what it stores shares no memory with v.
func decodeMeta(v string, m *Message) error {
	version, rest, _ := strings.Cut(v, ";")
	flags, rest, _ := strings.Cut(rest, ";")
	origin64, props64, ok := strings.Cut(rest, ";")
	if !ok || version != metaVersion || len(flags) != 2 || strings.IndexByte(props64, ';') >= 0 {
		return errMeta
	}
	qos, retain := flags[0], flags[1]
	if qos < '0' || qos > '2' || (retain != '0' && retain != '1') {
		return errMeta
	}
	origin, err := b64.DecodeString(origin64)
	if err != nil || len(origin) > 65535 || !packets.ValidUTF8String(string(origin)) {
		return errMeta
	}
	m.QoS, m.Retain, m.Origin, m.Properties = qos-'0', retain == '1', string(origin), nil
	if props64 == "" {
		return nil
	}
	raw, err := b64.DecodeString(props64)
	if err != nil {
		return errMeta
	}
	p := new(packets.Properties)
	n, err := p.Decode(raw, packets.TypePublish, false)
	if err != nil || n != len(raw) || p.Present&noTravel != 0 || len(p.SubscriptionIDs) > 0 {
		return errMeta
	}
	if p.Size() > 1 {
		m.Properties = p
	}
	return nil
}
