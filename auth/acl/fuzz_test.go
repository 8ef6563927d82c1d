package acl_test

import (
	"strings"
	"testing"

	"mqttd/auth"
	"mqttd/auth/acl"
	"mqttd/topictrie"
)

// FuzzParse feeds arbitrary files to the parser: it must not panic, and a
// file it accepts must answer without panicking.
func FuzzParse(f *testing.F) {
	f.Add("topic read a/#\nuser u\ntopic deny a/b\npattern readwrite d/%u/%c/#\n", "u", "c", "a/b")
	f.Add("# c\n  topic  write  x y \n", "", "id", "x y")
	f.Add("pattern read %%u%c%\n", "+", "#", "%+#")
	f.Add("user\n", "", "", "")
	f.Add("admin\nuser u\nadmin\ntopic a\n", "u", "c", "a")
	f.Fuzz(func(t *testing.T, text, user, id, topic string) {
		rs, err := acl.Parse("fuzz", strings.NewReader(text))
		if err != nil {
			if rs != nil {
				t.Fatal("rules returned with an error")
			}
			return
		}
		if rs.Admin(user) && !strings.Contains(text, "admin") {
			t.Fatalf("%q is an admin of a file without an admin line", user)
		}
		c := auth.ClientInfo{Username: user, ClientID: id}
		for _, a := range []auth.Action{auth.Publish, auth.Subscribe, auth.Will, auth.Read} {
			rs.Authorize(c, auth.Request{Action: a, Topic: topic})
		}
	})
}

// FuzzMatch checks a topic rule against topictrie.Matches, the broker's
// own matcher, and that a subscription a rule grants delivers only topics
// that rule grants.
func FuzzMatch(f *testing.F) {
	f.Add("a/+/#", "a/+/c", "a/b/c")
	f.Add("#", "#", "$SYS/x")
	f.Add("+/x", "$SYS/x", "$SYS/x")
	f.Add("a/#", "a", "a")
	f.Add("a/+", "a/#", "a/b/c")
	f.Fuzz(func(t *testing.T, rule, filter, topic string) {
		if strings.ContainsAny(rule, "\n\r\t\v\f ") || topictrie.ValidFilter(rule) != nil ||
			topictrie.ValidTopicName(topic) != nil {
			t.Skip()
		}
		rs, err := acl.Parse("fuzz", strings.NewReader("topic read "+rule))
		if err != nil {
			t.Fatalf("valid filter %q refused: %v", rule, err)
		}
		c := auth.ClientInfo{ClientID: "c"}
		read := rs.Authorize(c, auth.Request{Action: auth.Read, Topic: topic})
		if want := topictrie.Matches(rule, topic); read != want {
			t.Fatalf("rule %q topic %q: read %v, Matches %v", rule, topic, read, want)
		}
		if pf, err := topictrie.ParseFilter(filter); err != nil || pf.Group != "" {
			return
		}
		if rs.Authorize(c, auth.Request{Action: auth.Subscribe, Topic: filter}) && topictrie.Matches(filter, topic) && !read {
			t.Fatalf("rule %q grants subscription %q, which receives %q the rule does not grant", rule, filter, topic)
		}
	})
}

// FuzzPatternIdentity checks that a pattern grants a client only its own
// level: whatever the username, client id and topic, a granted topic is
// matched by the pattern expanded for an identity with no +, #, / or
// leading $.
func FuzzPatternIdentity(f *testing.F) {
	f.Add("alice", "c1", "devices/alice/x")
	f.Add("#", "c1", "devices/x")
	f.Add("a/b", "c1", "devices/a/b")
	f.Add("u", "a/b", "clients/a/b/x")
	f.Add("$SYS", "c", "$SYS/x")
	rs, err := acl.Parse("fuzz", strings.NewReader("pattern readwrite devices/%u/#\npattern read clients/%c/+/#\npattern read %c\n"))
	if err != nil {
		f.Fatal(err)
	}
	safe := func(s string) bool { return !strings.ContainsAny(s, "+#/") && !strings.HasPrefix(s, "$") }
	f.Fuzz(func(t *testing.T, user, id, topic string) {
		if topictrie.ValidTopicName(topic) != nil {
			t.Skip()
		}
		c := auth.ClientInfo{Username: user, ClientID: id}
		if rs.Authorize(c, auth.Request{Action: auth.Read, Topic: topic}) {
			if !safe(user) || !safe(id) {
				t.Fatalf("user %q client %q granted %q", user, id, topic)
			}
			if !topictrie.Matches("devices/"+user+"/#", topic) && !topictrie.Matches("clients/"+id+"/+/#", topic) && topic != id {
				t.Fatalf("user %q client %q granted %q, which no expansion matches", user, id, topic)
			}
		}
	})
}
