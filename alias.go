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

// topicAliases is a connection's inbound alias table.
type topicAliases struct {
	in    []string // by alias - 1
	bytes int      // the topics' length
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
	a := c.aliases
	if p.Topic == "" {
		if a == nil || alias > len(a.in) || a.in[alias-1] == "" {
			return c.protocolError("§3.3.2.3.4", "PUBLISH with an empty topic and an alias never set")
		}
		p.Topic = a.in[alias-1]
		return nil
	}
	if a == nil {
		a = &topicAliases{}
		c.aliases = a
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
