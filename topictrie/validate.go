package topictrie

import (
	"errors"
	"strings"
)

// Validation errors. Every error returned by the validating functions of this
// package is one of these, so the broker can map it to a reason code with
// errors.Is: any error from a filter check answers SUBACK 0x80 (3.1.1) or
// 0x8F (5.0); any error from a topic name check answers 0x90.
var (
	// ErrEmpty reports a topic name or filter of zero length [MQTT-4.7.3-1].
	ErrEmpty = errors.New("topictrie: empty topic")
	// ErrTooLong reports a topic longer than Limits.MaxLength bytes [MQTT-4.7.3-3].
	ErrTooLong = errors.New("topictrie: topic too long")
	// ErrTooManyLevels reports a topic with more levels than Limits.MaxLevels.
	ErrTooManyLevels = errors.New("topictrie: too many topic levels")
	// ErrNull reports a topic containing U+0000 [MQTT-4.7.3-2].
	ErrNull = errors.New("topictrie: topic contains U+0000")
	// ErrWildcardInName reports a + or # in a topic name [MQTT-4.7.1-1].
	ErrWildcardInName = errors.New("topictrie: wildcard in topic name")
	// ErrBadWildcard reports a + that does not occupy a whole level, or a #
	// that is not the whole last level of a filter [MQTT-4.7.1-2] [MQTT-4.7.1-3].
	ErrBadWildcard = errors.New("topictrie: misplaced wildcard in filter")
	// ErrShareName reports a $share filter whose share name is empty or
	// contains + or # [MQTT-4.8.2-1] [MQTT-4.8.2-2].
	ErrShareName = errors.New("topictrie: invalid share name")
	// ErrShareFilter reports a $share filter with no topic filter after the
	// share name [MQTT-4.8.2-2].
	ErrShareFilter = errors.New("topictrie: shared subscription without a topic filter")
)

// Default limits used when a Limits field is zero.
const (
	// DefaultMaxLength is the longest topic MQTT can encode, in bytes.
	DefaultMaxLength = 65535
	// DefaultMaxLevels follows Mosquitto's topic hierarchy limit.
	DefaultMaxLevels = 200
)

// sharePrefix starts every shared subscription filter.
const sharePrefix = "$share/"

// Limits bounds the topics this package accepts. The zero value means the
// defaults.
type Limits struct {
	// MaxLength is the maximum length of a topic name or filter in bytes;
	// zero means DefaultMaxLength.
	MaxLength int `yaml:"max_length"`
	// MaxLevels is the maximum number of levels of a topic name or filter
	// (of the filter after the share prefix for shared subscriptions); zero
	// means DefaultMaxLevels.
	MaxLevels int `yaml:"max_levels"`
}

func (l Limits) maxLength() int {
	if l.MaxLength <= 0 {
		return DefaultMaxLength
	}
	return l.MaxLength
}

func (l Limits) maxLevels() int {
	if l.MaxLevels <= 0 {
		return DefaultMaxLevels
	}
	return l.MaxLevels
}

// common checks the rules shared by names and filters. It counts separators
// with one pass before anything splits the topic, so a topic with thousands of
// levels is rejected in time linear in its length (CVE-2019-11779).
func (l Limits) common(s string) error {
	switch {
	case s == "":
		return ErrEmpty // [MQTT-4.7.3-1]
	case len(s) > l.maxLength():
		return ErrTooLong // [MQTT-4.7.3-3]
	case strings.Count(s, "/") >= l.maxLevels():
		return ErrTooManyLevels
	case strings.IndexByte(s, 0) >= 0:
		return ErrNull // [MQTT-4.7.3-2]
	}
	return nil
}

// ValidTopicName reports whether s may be used as the topic name of a PUBLISH.
func (l Limits) ValidTopicName(s string) error {
	if err := l.common(s); err != nil {
		return err
	}
	if hasWildcard(s) {
		return ErrWildcardInName // [MQTT-4.7.1-1]
	}
	return nil
}

// ValidFilter reports whether s may be used as a subscription filter,
// including a shared subscription filter.
func (l Limits) ValidFilter(s string) error {
	_, err := l.ParseFilter(s)
	return err
}

// Filter is a validated subscription filter split into its share group and
// the topic filter matched against topic names.
type Filter struct {
	// Group is the share name of a $share/{group}/{filter} subscription;
	// empty for a normal subscription.
	Group string
	// Topic is the filter matched against topic names: the whole filter for
	// a normal subscription, the part after the share name otherwise.
	Topic string
}

// ParseFilter validates s and splits a shared subscription filter into its
// share name and topic filter. A filter whose first level is "$share" and
// which has more than one level is a shared subscription.
func (l Limits) ParseFilter(s string) (Filter, error) {
	if !strings.HasPrefix(s, sharePrefix) {
		return Filter{Topic: s}, l.validTopicFilter(s)
	}
	if len(s) > l.maxLength() {
		return Filter{}, ErrTooLong
	}
	rest := s[len(sharePrefix):]
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		// "$share/g": the name must be followed by "/" and a filter [MQTT-4.8.2-2].
		if rest == "" || hasWildcard(rest) {
			return Filter{}, ErrShareName
		}
		return Filter{}, ErrShareFilter
	}
	group, topic := rest[:i], rest[i+1:]
	if group == "" {
		return Filter{}, ErrShareName // [MQTT-4.8.2-1]
	}
	if hasWildcard(group) || strings.IndexByte(group, 0) >= 0 {
		return Filter{}, ErrShareName // [MQTT-4.8.2-2]
	}
	if topic == "" {
		return Filter{}, ErrShareFilter // [MQTT-4.8.2-2]
	}
	return Filter{Group: group, Topic: topic}, l.validTopicFilter(topic)
}

// validTopicFilter checks the wildcard rules of a (non-shared) filter. Bytes
// of a multi-byte UTF-8 sequence are all >= 0x80, so scanning bytes for '/',
// '+' and '#' cannot split a character.
func (l Limits) validTopicFilter(s string) error {
	if err := l.common(s); err != nil {
		return err
	}
	for off := 0; ; {
		i := strings.IndexAny(s[off:], "+#")
		if i < 0 {
			return nil
		}
		i += off
		if i > 0 && s[i-1] != '/' {
			return ErrBadWildcard // [MQTT-4.7.1-2] [MQTT-4.7.1-3]
		}
		if s[i] == '#' && i != len(s)-1 {
			return ErrBadWildcard // [MQTT-4.7.1-2]
		}
		if i+1 < len(s) && s[i+1] != '/' {
			return ErrBadWildcard // [MQTT-4.7.1-3]
		}
		off = i + 1
	}
}

// ValidTopicName reports whether s may be used as the topic name of a PUBLISH
// under the default Limits.
func ValidTopicName(s string) error { return Limits{}.ValidTopicName(s) }

// ValidFilter reports whether s may be used as a subscription filter under
// the default Limits.
func ValidFilter(s string) error { return Limits{}.ValidFilter(s) }

// ParseFilter validates s under the default Limits and splits a shared
// subscription filter into its share name and topic filter.
func ParseFilter(s string) (Filter, error) { return Limits{}.ParseFilter(s) }

// hasWildcard reports a + or # in s; two byte scans beat
// strings.ContainsAny, which builds a set on every call.
func hasWildcard(s string) bool {
	return strings.IndexByte(s, '+') >= 0 || strings.IndexByte(s, '#') >= 0
}

// Matches reports whether topic name topic matches filter, a valid filter
// without a $share prefix, as the trie matches them: + is one level, # the
// rest (the parent level included), and a filter starting with a wildcard
// matches no topic starting with $ [MQTT-4.7.2-1].
func Matches(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	for {
		if filter == "#" {
			return true
		}
		fl, frest, fmore := strings.Cut(filter, "/")
		tl, trest, tmore := strings.Cut(topic, "/")
		if fl != "+" && fl != tl {
			return false
		}
		switch {
		case !fmore && !tmore:
			return true
		case !tmore:
			return frest == "#" // "a/#" matches "a" [MQTT-4.7.1-2]
		case !fmore:
			return false
		}
		filter, topic = frest, trest
	}
}

// Overlap reports whether some topic name matches both a and b, valid
// filters without a $share prefix. + overlaps any level, # the rest of
// the other filter (the parent level included), and a filter starting
// with a wildcard overlaps none whose first level is a name starting
// with $ [MQTT-4.7.2-1].
func Overlap(a, b string) bool {
	if dollarOnly(a, b) || dollarOnly(b, a) {
		return false
	}
	for {
		if a == "#" || b == "#" {
			return true
		}
		al, arest, amore := strings.Cut(a, "/")
		bl, brest, bmore := strings.Cut(b, "/")
		if al != "+" && bl != "+" && al != bl {
			return false
		}
		switch {
		case !amore && !bmore:
			return true
		case !amore:
			return brest == "#" // "a" and "a/#" both match "a"
		case !bmore:
			return arest == "#"
		}
		a, b = arest, brest
	}
}

// dollarOnly reports whether a's first level is a name starting with $
// and b starts with a wildcard, which matches no such topic.
func dollarOnly(a, b string) bool {
	return strings.HasPrefix(a, "$") && (strings.HasPrefix(b, "+") || strings.HasPrefix(b, "#"))
}
