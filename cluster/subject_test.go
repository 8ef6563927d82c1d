package cluster

import (
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"mqttd/packets"
	"mqttd/topictrie"
)

// nastyTopics seed the subject fuzzers and the table tests: every byte
// NATS gives a meaning to, empty levels, '$', the escape itself, unicode.
var nastyTopics = []string{
	".", "*", ">", " ", "", "/", "//", "$SYS/x", "a/+/b", "%", "%25", "%%/%",
	"a.b/c*d/e>f", "a/ /b", "\t/\r\n", "\x7f", "$", "a/$b/$", "$$", "über/温度/🙂",
	"a/b/c", "sport/tennis/player1", "/a/", "a//b", "*/>", "mqttd.x.t.a",
}

func validTestTopic(topic string) bool {
	return topictrie.ValidTopicName(topic) == nil && packets.ValidUTF8String(topic)
}

func TestSubjectTable(t *testing.T) {
	for topic, want := range map[string]string{
		"a/b/c":   "mqttd.c1.t.a.b.c",
		"/":       "mqttd.c1.t.%.%",
		"a.b/c d": "mqttd.c1.t.a%2Eb.c%20d",
		"*/>/%":   "mqttd.c1.t.%2A.%3E.%25",
		"$SYS/x$": "mqttd.c1.t.%24SYS.x$",
		"über":    "mqttd.c1.t.über",
	} {
		if got := Subject("c1", topic); got != want {
			t.Errorf("Subject(%q) = %q, want %q", topic, got, want)
		}
	}
}

func TestFilterSubjectsTable(t *testing.T) {
	for filter, want := range map[string][]string{
		"#":       {"mqttd.c1.t.>"},
		"a/#":     {"mqttd.c1.t.a.>", "mqttd.c1.t.a"},
		"+/#":     {"mqttd.c1.t.*.>", "mqttd.c1.t.*"},
		"a/+/c":   {"mqttd.c1.t.a.*.c"},
		"+":       {"mqttd.c1.t.*"},
		"/+/":     {"mqttd.c1.t.%.*.%"},
		"a.b/*/#": {"mqttd.c1.t.a%2Eb.%2A.>", "mqttd.c1.t.a%2Eb.%2A"},
	} {
		if got := FilterSubjects("c1", filter); !slices.Equal(got, want) {
			t.Errorf("FilterSubjects(%q) = %q, want %q", filter, got, want)
		}
	}
}

func TestTopicOfRefuses(t *testing.T) {
	for _, subj := range []string{
		"mqttd.c1.t.", "mqttd.c2.t.a", "other.a", "mqttd.c1.t.a..b", "mqttd.c1.t.%2", "mqttd.c1.t.%zz",
		"mqttd.c1.t.%41", "mqttd.c1.t.%2e", "mqttd.c1.t.a b", "mqttd.c1.t.$SYS", "mqttd.c1.t.%00",
		"mqttd.c1.t.a+", "mqttd.c1.t.#", "mqttd.c1.t.\xff", "mqttd.c1.t.*", "mqttd.c1.t.a.>",
		"mqttd.c1.t.a/b", "mqttd.c1.t.%2F",
	} {
		if topic, ok := TopicOf("c1", subj); ok {
			t.Errorf("TopicOf(%q) = %q, true; want false", subj, topic)
		}
	}
}

// checkSubject is FuzzSubject's property for one topic.
func checkSubject(t *testing.T, topic string) {
	t.Helper()
	if !validTestTopic(topic) {
		return
	}
	subj := Subject("c1", topic)
	if !server.IsValidPublishSubject(subj) {
		t.Fatalf("Subject(%q) = %q: not a valid NATS publish subject", topic, subj)
	}
	if got, ok := TopicOf("c1", subj); !ok || got != topic {
		t.Fatalf("TopicOf(Subject(%q)) = %q, %v", topic, got, ok)
	}
	if strings.Count(subj, ".") != 3+strings.Count(topic, "/") {
		t.Fatalf("Subject(%q) = %q: not one token per level", topic, subj)
	}
}

func FuzzSubject(f *testing.F) {
	for _, s := range nastyTopics {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkSubject(t, s)
		// Any subject from the network: TopicOf accepts only what Subject
		// spells, so every accepted subject is the one of its topic.
		if topic, ok := TopicOf("c1", prefix("c1")+s); ok {
			if !validTestTopic(topic) && topictrie.ValidTopicName(topic) != topictrie.ErrTooManyLevels {
				t.Fatalf("TopicOf accepted %q as invalid topic %q", s, topic)
			}
			if again := Subject("c1", topic); again != prefix("c1")+s {
				t.Fatalf("TopicOf(%q) = %q whose subject is %q", s, topic, again)
			}
		}
	})
}

// checkFilter is FuzzFilterSubjects' property for one filter and topic:
// the filter matches the topic exactly when one of its subjects matches
// the topic's (a '$' topic aside, which wildcards of MQTT skip but
// subjects cannot, and which never crosses), never by two subjects.
func checkFilter(t *testing.T, filter, topic string) {
	t.Helper()
	if !validTestTopic(topic) || topictrie.ValidFilter(filter) != nil || strings.HasPrefix(filter, "$share/") ||
		!packets.ValidUTF8String(filter) {
		return
	}
	subjects := FilterSubjects("c1", filter)
	matched := 0
	for _, fs := range subjects {
		if !server.IsValidSubject(fs) {
			t.Fatalf("FilterSubjects(%q) has %q: not a valid NATS subject", filter, fs)
		}
		if server.SubjectMatchesFilter(Subject("c1", topic), fs) {
			matched++
		}
	}
	want := topictrie.Matches(filter, topic)
	switch {
	case want && matched != 1:
		t.Fatalf("%q matches %q but %d of subjects %q match %q", filter, topic, matched, subjects, Subject("c1", topic))
	case !want && matched > 0 && !strings.HasPrefix(topic, "$"):
		t.Fatalf("%q does not match %q but subjects %q match %q", filter, topic, subjects, Subject("c1", topic))
	}
}

// filterOf derives from topic a filter of it: the levels whose bit of
// wild is set become '+', and past level cut the rest is '#'.
func filterOf(topic string, wild uint64, cut uint8) string {
	levels := strings.Split(topic, "/")
	for i := range levels {
		if i < 64 && wild&(1<<i) != 0 {
			levels[i] = "+"
		}
	}
	if int(cut) < len(levels) {
		levels = append(levels[:cut], "#")
	}
	return strings.Join(levels, "/")
}

func FuzzFilterSubjects(f *testing.F) {
	for i, s := range nastyTopics {
		f.Add(s, s, uint64(i), uint8(i%4))
		f.Add("#", s, uint64(0), uint8(255))
	}
	f.Add("a/+/b", "a/x/b", uint64(2), uint8(1))
	f.Add("a/#", "a", uint64(0), uint8(0))
	f.Fuzz(func(t *testing.T, filter, topic string, wild uint64, cut uint8) {
		checkFilter(t, filter, topic)
		checkFilter(t, filterOf(topic, wild, cut), topic)
	})
}

// TestCrosses: the broker's '$' topics stay on their node but its dead
// letters.
func TestCrosses(t *testing.T) {
	for topic, want := range map[string]bool{
		"a/b": true, "#": true, "+/x": true, "$SYS/broker/uptime": false, "$SYS/#": false, "$DLQ/queue_full/t": true,
		"$DLQ/#": true, "$DLQ": false,
	} {
		if got := Crosses(topic); got != want {
			t.Errorf("Crosses(%q) = %v, want %v", topic, got, want)
		}
	}
}
