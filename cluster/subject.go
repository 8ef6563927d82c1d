package cluster

import (
	"strings"

	"mqttd/packets"
)

// MaxSubjectLen is the longest NATS subject a node sends or subscribes to.
// A NATS server closes a client whose protocol line exceeds its
// max_control_line (4,096 bytes by default), and a subscription line also
// carries the queue name and an id: a topic whose subject would be longer
// is not sent (Stats.TooLong), and a filter subject that long is not
// subscribed, since no topic it matches could be sent.
const MaxSubjectLen = 3500

// escape starts a two-digit upper-case hexadecimal escape of one byte; a
// token that is escape alone is an empty topic level.
const escape = '%'

const hexDigits = "0123456789ABCDEF"

// prefix is the subject prefix of a cluster's topics.
func prefix(cluster string) string { return "mqttd." + cluster + ".t." }

// retainedPrefix is the subject prefix of a cluster's retained messages
// published for the share groups, and the retained stream's kept
// messages are named after it.
func retainedPrefix(cluster string) string { return "mqttd." + cluster + ".r." }

// needsEscape reports whether byte c of a topic level, at index i of the
// level, cannot stand for itself in a NATS token: the token separator,
// the wildcards, the escape character, white space and control bytes
// (which NATS rejects or which a reader of subjects would misread), and a
// '$' leading a level, so that no token of ours ever starts like a NATS
// system subject.
func needsEscape(c byte, i int) bool {
	switch {
	case c <= ' ' || c == 0x7F:
		return true
	case c == '.' || c == '*' || c == '>' || c == escape:
		return true
	case c == '$':
		return i == 0
	}
	return false
}

// appendLevel appends the token of one topic level.
func appendLevel(b []byte, level string) []byte {
	if level == "" {
		return append(b, escape)
	}
	for i := 0; i < len(level); i++ {
		c := level[i]
		if needsEscape(c, i) {
			b = append(b, escape, hexDigits[c>>4], hexDigits[c&0xF])
			continue
		}
		b = append(b, c)
	}
	return b
}

// Subject is the NATS subject of MQTT topic name topic in cluster cluster:
// the cluster's prefix ("mqttd.<cluster>.t.") and one token per topic
// level, escaped so that the mapping is reversed by TopicOf.
func Subject(cluster, topic string) string { return subjectUnder(prefix(cluster), topic) }

// subjectUnder is the subject of topic under prefix p.
func subjectUnder(p, topic string) string {
	b := make([]byte, 0, len(p)+len(topic)+8)
	b = append(b, p...)
	return string(appendLevels(b, topic))
}

func appendLevels(b []byte, topic string) []byte {
	for {
		level, rest, more := strings.Cut(topic, "/")
		b = appendLevel(b, level)
		if !more {
			return b
		}
		b = append(b, '.')
		topic = rest
	}
}

// FilterSubjects are the NATS subjects a node subscribes to for MQTT
// filter filter (without a $share prefix): each level as Subject encodes
// it, '+' as '*', and a trailing '#' as '>' together with the subject of
// its parent level, since "a/#" matches "a" too; "#" alone is the
// prefix's '>'. Every topic the filter matches has a subject matched by
// one of them (and by only one, which FilterSubjects' callers rely on).
func FilterSubjects(cluster, filter string) []string {
	p := prefix(cluster)
	if filter == "#" {
		return []string{p + ">"}
	}
	parent, multi := strings.CutSuffix(filter, "/#")
	b := append(make([]byte, 0, len(p)+len(filter)+8), p...)
	for {
		level, rest, more := strings.Cut(parent, "/")
		if level == "+" {
			b = append(b, '*')
		} else {
			b = appendLevel(b, level)
		}
		if !more {
			break
		}
		b = append(b, '.')
		parent = rest
	}
	if !multi {
		return []string{string(b)}
	}
	return []string{string(b) + ".>", string(b)}
}

// TopicOf reverses Subject: the MQTT topic name of subject in cluster
// cluster, and false when subject is not under the cluster's prefix or is
// not the encoding Subject gives a valid topic name (bad or needless
// escapes, wildcards, NUL, invalid UTF-8), so that when it reports true,
// Subject(cluster, topic) == subject. Subjects come from the network:
// TopicOf never panics.
func TopicOf(cluster, subject string) (string, bool) { return topicUnder(prefix(cluster), subject) }

// topicUnder is TopicOf for the subjects under prefix p.
func topicUnder(p, subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, p)
	if !ok || rest == "" {
		return "", false
	}
	b := make([]byte, 0, len(rest))
	for {
		token, next, more := strings.Cut(rest, ".")
		var ok bool
		if b, ok = appendDecoded(b, token); !ok {
			return "", false
		}
		if !more {
			break
		}
		b = append(b, '/')
		rest = next
	}
	topic := string(b)
	if !validTopic(topic) {
		return "", false
	}
	return topic, true
}

// appendDecoded appends the topic level of token, reporting false for an
// empty token, a bad escape, a byte that Subject would have escaped or an
// escape Subject would not have written: every topic has one subject.
func appendDecoded(b []byte, token string) ([]byte, bool) {
	if token == "" {
		return b, false
	}
	if token == string(escape) {
		return b, true
	}
	start := len(b)
	for i := 0; i < len(token); i++ {
		c := token[i]
		if c == escape {
			if i+2 >= len(token) {
				return b, false
			}
			hi, lo := unhex(token[i+1]), unhex(token[i+2])
			if hi < 0 || lo < 0 {
				return b, false
			}
			c = byte(hi<<4 | lo)
			i += 2
			if !needsEscape(c, len(b)-start) {
				return b, false // not as Subject spells it
			}
		} else if c == '/' || needsEscape(c, len(b)-start) {
			return b, false // a token is one level
		}
		b = append(b, c)
	}
	return b, true
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}

// validTopic reports whether topic, decoded from the network, is a topic
// name a PUBLISH could carry: not empty, at most 65,535 bytes, valid UTF-8
// without U+0000, no wildcard. The receiving broker applies its own
// limits (levels, length) as it does to its clients' topics.
func validTopic(topic string) bool {
	return topic != "" && len(topic) <= 65535 &&
		!strings.ContainsAny(topic, "+#") && packets.ValidUTF8String(topic)
}
