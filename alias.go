package mqttd

import (
	"strings"

	"mqttd/packets"
)

// Topic aliases a 5.0 client sets on its PUBLISHes (§3.3.2.3.4): the
// broker advertises limits.max_topic_alias in CONNACK and keeps, per
// connection, the topic each alias stands for. The table is allocated on
// the first alias, so a connection that uses none pays a pointer.

// maxAliasBytes bounds the topics one connection's aliases keep: ten
// aliases of the longest topic a packet can carry would keep 640 KiB a
// connection.
const maxAliasBytes = 16 << 10

// topicAliases is a connection's alias tables: in, the client's (only its
// reader touches them), and out, the broker's (under the outbox lock).
type topicAliases struct {
	in    []string // by alias - 1
	bytes int      // the topics' length
	out   *outAliases
}

// resolveAlias applies a PUBLISH's Topic Alias: it records the topic under
// the alias, or, for an empty topic, fills the topic in from it. Without
// an alias an empty topic is a protocol error [MQTT-4.7.3-1]. It returns
// the error that closes the connection.
func (c *conn) resolveAlias(p *packets.Publish) error {
	if !p.Properties.Has(packets.PropTopicAlias) {
		if p.Topic == "" && c.version == packets.V5 {
			return c.protocolError("§3.3.2.3.4", "PUBLISH with an empty topic and no topic alias")
		}
		return nil
	}
	max := c.srv.opts.Limits.MaxTopicAlias
	alias := int(p.Properties.TopicAlias)
	if alias == 0 || alias > max {
		return c.fail(&packets.Error{Code: packets.TopicAliasInvalid, Ref: "§3.3.2.3.4",
			Msg: "topic alias 0 or above the Topic Alias Maximum"})
	}
	a := c.aliases.Load()
	if p.Topic == "" {
		if a == nil || alias > len(a.in) || a.in[alias-1] == "" {
			return c.protocolError("§3.3.2.3.4", "PUBLISH with an empty topic and an alias never set")
		}
		p.Topic = a.in[alias-1]
		return nil
	}
	if a == nil {
		a = &topicAliases{}
		c.aliases.Store(a)
	}
	if alias > len(a.in) {
		a.in = append(a.in, make([]string, alias-len(a.in))...)
	}
	grown := a.bytes - len(a.in[alias-1]) + len(p.Topic)
	if grown > maxAliasBytes {
		return c.fail(&packets.Error{Code: packets.QuotaExceeded, Ref: "§3.3.2.3.4",
			Msg: "topic aliases keep more than 16 KiB of topics"})
	}
	if a.in[alias-1] != p.Topic {
		a.in[alias-1] = strings.Clone(p.Topic) // kept past the packet
	}
	a.bytes = grown
	return nil
}

// maxOutAliases bounds the aliases the broker gives one client, whatever
// its Topic Alias Maximum: a miss scans them for the least recently used.
const maxOutAliases = 128

// outAliases is the aliases the broker gave the topics it sends a 5.0
// client whose Topic Alias Maximum allows them. When they are all taken,
// the least recently used goes to the new topic, so that the topics sent
// most keep theirs. Guarded by the outbox lock: aliases are given in the
// order frames are queued, which is the order they reach the wire, so a
// PUBLISH carrying only an alias always follows the one that set it.
type outAliases struct {
	max     int
	byTopic map[string]uint16
	slots   []outAlias // by alias - 1
	bytes   int
	clock   uint32
}

type outAlias struct {
	topic string
	used  uint32
}

func newOutAliases(clientMax uint16) *outAliases {
	return &outAliases{max: min(int(clientMax), maxOutAliases), byTopic: make(map[string]uint16)}
}

// assign returns the alias for topic and whether the topic must be sent
// with it (the alias is new, or given to this topic now); alias 0 means
// none: the topic is sent alone.
func (a *outAliases) assign(topic string) (alias uint16, sendTopic bool) {
	a.clock++
	if alias, ok := a.byTopic[topic]; ok {
		a.slots[alias-1].used = a.clock
		return alias, false
	}
	i := len(a.slots)
	if i == a.max {
		i = 0
		for j := range a.slots {
			if a.slots[j].used < a.slots[i].used {
				i = j
			}
		}
	}
	old := ""
	if i < len(a.slots) {
		old = a.slots[i].topic
	}
	if a.bytes-len(old)+len(topic) > maxAliasBytes {
		return 0, true
	}
	if i == len(a.slots) {
		a.slots = append(a.slots, outAlias{})
	} else {
		delete(a.byTopic, old)
	}
	kept := strings.Clone(topic) // not the publisher's frame
	a.slots[i] = outAlias{topic: kept, used: a.clock}
	a.byTopic[kept] = uint16(i + 1)
	a.bytes += len(kept) - len(old)
	return uint16(i + 1), true
}

// forget takes back an alias whose PUBLISH was not sent after all (larger
// than the client's Maximum Packet Size): the client never learnt it.
func (a *outAliases) forget(alias uint16) {
	s := &a.slots[alias-1]
	delete(a.byTopic, s.topic)
	a.bytes -= len(s.topic)
	*s = outAlias{}
}
