package acl_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"mqttd/auth"
	"mqttd/auth/acl"
)

// parse parses an ACL file given as text and fails the test on an error.
func parse(t *testing.T, text string) *acl.Rules {
	t.Helper()
	rs, err := acl.Parse("test.acl", strings.NewReader(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return rs
}

// who is a client: username ("" for anonymous) and client id.
type who struct{ user, id string }

func (w who) info() auth.ClientInfo { return auth.ClientInfo{Username: w.user, ClientID: w.id} }

type check struct {
	who    who
	action auth.Action
	topic  string
	want   bool
}

// run checks every case against rs.
func run(t *testing.T, rs auth.Authorizer, cases []check) {
	t.Helper()
	for _, c := range cases {
		got := rs.Authorize(c.who.info(), auth.Request{Action: c.action, Topic: c.topic})
		if got != c.want {
			t.Errorf("user %q client %q %v %q: got %v, want %v", c.who.user, c.who.id, c.action, c.topic, got, c.want)
		}
	}
}

var (
	anon  = who{"", "anon1"}
	alice = who{"alice", "a1"}
	bob   = who{"bob", "b1"}
)

const (
	pub  = auth.Publish
	sub  = auth.Subscribe
	read = auth.Read
	will = auth.Will
)

func TestSections(t *testing.T) {
	rs := parse(t, `
# anonymous clients
topic read public/#
   topic write   inbox/anon  

user alice
topic readwrite alice/#
topic deny alice/secret
topic read $SYS/#
topic readwrite with spaces/x y

user bob
topic bob/#
topic write alice/inbox
`)
	run(t, rs, []check{
		{anon, read, "public/a", true},
		{anon, sub, "public/#", true},
		{anon, pub, "public/a", false},
		{anon, pub, "inbox/anon", true},
		{anon, read, "inbox/anon", false},
		{anon, read, "alice/x", false},
		{alice, read, "public/a", false}, // the anonymous section is not hers
		{alice, pub, "alice/x/y", true},
		{alice, will, "alice/status", true},
		{alice, auth.Action(0), "alice/x", false}, // an action it does not know is refused
		{alice, read, "alice", true},              // "alice/#" matches its parent
		{alice, read, "alice/secret", false},
		{alice, pub, "alice/secret", false},
		{alice, sub, "alice/secret", false},
		{alice, sub, "alice/#", true}, // deliveries of alice/secret are refused by Read
		{alice, read, "$SYS/broker/uptime", true},
		{alice, pub, "$SYS/broker/uptime", false},
		{alice, read, "with spaces/x y", true},
		{bob, pub, "bob", true},
		{bob, read, "bob/1", true},
		{bob, pub, "alice/inbox", true},
		{bob, read, "alice/inbox", false},
		{who{"carol", "c"}, read, "public/a", false}, // no section, no patterns
	})
}

func TestDenyPrecedence(t *testing.T) {
	// Deny rules are checked first whatever their place in the section;
	// the client's section decides before the patterns, as in Mosquitto.
	rs := parse(t, `
user alice
topic readwrite #
topic deny secret/#
topic read other/#
user bob
topic read shared/#
pattern deny shared/%c/#
pattern readwrite dev/%u/#
pattern deny dev/%u/locked
`)
	run(t, rs, []check{
		{alice, read, "secret/x", false},
		{alice, pub, "secret", false},
		{alice, read, "x/y", true},
		{alice, sub, "#", true},
		{alice, sub, "secret/+", false},
		{alice, sub, "+/x", true},
		{bob, read, "shared/b1/x", true}, // bob's section allows before pattern denies
		{bob, read, "dev/bob/x", true},
		{bob, pub, "dev/bob/locked", false},
		{bob, pub, "dev/alice/x", false},
		{who{"carol", "c1"}, pub, "dev/carol/x", true},
		{who{"carol", "c1"}, read, "shared/c1/x", false},
	})
}

func TestPatterns(t *testing.T) {
	rs := parse(t, `
pattern readwrite devices/%u/#
pattern read clients/%c
pattern write log/%u-%c
pattern read 100%%u/x
pattern read lit%x
`)
	run(t, rs, []check{
		{alice, pub, "devices/alice/temp", true},
		{alice, pub, "devices/bob/temp", false},
		{alice, sub, "devices/alice/#", true},
		{alice, sub, "devices/+/temp", false},
		{alice, sub, "devices/#", false},
		{alice, read, "clients/a1", true},
		{alice, read, "clients/a2", false},
		{alice, pub, "log/alice-a1", true},
		{alice, pub, "log/alice-a", false},
		{alice, read, "100%alice/x", true},
		{alice, read, "lit%x", true},
		{anon, read, "clients/anon1", true},
		{anon, pub, "devices//x", false}, // %u needs a username
		{anon, pub, "log/-anon1", false},
	})
}

func TestSubscribeCover(t *testing.T) {
	rs := parse(t, `
topic read sensors/#
topic read rooms/+/temp
topic read exact
topic read #
user u
topic read a/+/c/#
`)
	a := who{"", "x"}
	u := who{"u", "x"}
	run(t, rs, []check{
		{a, sub, "sensors/+/temp", true},
		{a, sub, "sensors", true},
		{a, sub, "#", true},
		{a, sub, "$SYS/#", false}, // # does not cover $ topics
		{a, sub, "+/#", true},
		{u, sub, "a/b/c", true},
		{u, sub, "a/+/c/d/#", true},
		{u, sub, "a/+/c/#", true},
		{u, sub, "a/#", false},
		{u, sub, "a/b/+", false},
		{u, sub, "a/b", false},
		{u, sub, "+/b/c", false},
	})
	rs = parse(t, "topic read rooms/+/temp\ntopic read sensors/#\n")
	run(t, rs, []check{
		{a, sub, "rooms/+/temp", true},
		{a, sub, "rooms/1/temp", true},
		{a, sub, "rooms/#", false},
		{a, sub, "rooms/+/+", false},
		{a, sub, "rooms/+/temp/#", false},
		{a, sub, "+/+/temp", false},
		{a, sub, "sensors/+/temp", true},
		{a, read, "rooms/1/temp", true},
		{a, read, "rooms/1/temp/x", false},
	})
}

func TestDollarTopics(t *testing.T) {
	rs := parse(t, `
topic readwrite #
topic readwrite +/+
user sys
topic readwrite $SYS/#
topic readwrite $other/#
topic readwrite $DLQ/#
`)
	s := who{"sys", "s"}
	run(t, rs, []check{
		{anon, sub, "$DLQ/#", false},
		{s, sub, "$DLQ/#", true},
		{s, read, "$DLQ/expired/a/b", true},
		{s, pub, "$DLQ/expired/a/b", false}, // dead letters are the broker's, as $SYS is
		{s, will, "$DLQ", false},
		{anon, read, "$SYS/broker/uptime", false},
		{anon, sub, "$SYS/#", false},
		{anon, read, "$other/x", false},
		{anon, read, "a/b", true},
		{s, read, "$SYS/broker/uptime", true},
		{s, sub, "$SYS/#", true},
		{s, pub, "$SYS/broker/uptime", false}, // read-only whatever the file says
		{s, will, "$SYS", false},
		{s, pub, "$other/x", true},
	})
}

// TestBypass tries identities and filters that would widen a rule if
// substituted or matched naively.
func TestBypass(t *testing.T) {
	rs := parse(t, `
topic read public/#
topic deny public/hidden
pattern readwrite devices/%u/#
pattern readwrite clients/%c/#
user admin
topic readwrite #
topic read $SYS/#
`)
	var cases []check
	for _, bad := range []string{"#", "+", "a/#", "a/+", "a/b", "$SYS", "x#", "+x"} {
		byUser := who{bad, "ok"}
		byID := who{"ok", bad}
		for _, w := range []who{byUser, byID} {
			cases = append(cases,
				check{w, pub, "devices/anything", false},
				check{w, pub, "devices/other/x", false},
				check{w, pub, "devices/a/b", false},
				check{w, read, "clients/a/b", false},
				check{w, sub, "devices/#", false},
				check{w, sub, "clients/#", false},
				check{w, read, "$SYS/broker/uptime", false},
			)
		}
	}
	// Well-behaved identities keep their own level.
	ok := who{"ok", "c"}
	cases = append(cases,
		check{ok, pub, "devices/ok/x", true},
		check{ok, pub, "clients/c/x", true},
		check{ok, sub, "devices/ok/#", true},
		check{ok, sub, "devices/+/#", false},
	)
	// Subscribing # or $share/g/# (asked with the prefix removed) grants
	// the filter only if covered, and each delivery is checked.
	for _, w := range []who{anon, {"", "#"}, {"", "+"}} {
		cases = append(cases,
			check{w, sub, "#", false},
			check{w, sub, "public/#", true},
			check{w, read, "public/hidden", false},
			check{w, read, "public/x", true},
			check{w, sub, "public/hidden", false},
			check{w, read, "$SYS/broker/uptime", false},
			check{w, sub, "$SYS/#", false},
		)
	}
	run(t, rs, cases)
	// The group of a shared subscription plays no part.
	c := anon.info()
	if rs.Authorize(c, auth.Request{Action: sub, Topic: "#", Group: "g"}) {
		t.Error("$share/g/# granted where # is not")
	}
	if !rs.Authorize(c, auth.Request{Action: sub, Topic: "public/#", Group: "g"}) {
		t.Error("$share/g/public/# refused where public/# is granted")
	}
}

func TestEmptyFileDeniesAll(t *testing.T) {
	for _, text := range []string{"", "# nothing\n\n", "user alice\n"} {
		rs := parse(t, text)
		run(t, rs, []check{
			{anon, read, "a", false},
			{alice, pub, "a", false},
			{alice, sub, "#", false},
		})
	}
	if (&acl.Rules{}).Authorize(alice.info(), auth.Request{Action: pub, Topic: "a"}) {
		t.Error("zero Rules granted a publish")
	}
}

func TestParse(t *testing.T) {
	good := []string{
		"topic a",
		"topic read", // one word: the topic "read", readwrite, as Mosquitto reads it
		"topic\tread\ta b",
		"  # indented comment",
		"user name with spaces\ntopic x",
		"pattern deny %u/%c/#",
		"topic read $share/g/x",
	}
	for _, text := range good {
		if _, err := acl.Parse("f", strings.NewReader(text)); err != nil {
			t.Errorf("%q: %v", text, err)
		}
	}
	rs := parse(t, "topic read\nuser name with spaces\ntopic read x y\n")
	run(t, rs, []check{
		{anon, pub, "read", true},
		{who{"name with spaces", "c"}, read, "x y", true},
	})
	bad := []struct {
		text string
		line int
	}{
		{"topic", 1},
		{"\n\ntopic   ", 3},
		{"user", 1},
		{"user   \t", 1},
		{"topic reed a", 1},
		{"topic READ a", 1},
		{"topics a", 1},
		{"# ok\nfoo bar", 2},
		{"topic read a/#/b", 1},
		{"topic read a+", 1},
		{"pattern write %u#", 1},
		{"topic read a\x00b", 1},
		{"topic read a\ntopic write " + strings.Repeat("a", 200000), 2},
	}
	for _, b := range bad {
		rs, err := acl.Parse("bad.acl", strings.NewReader(b.text))
		var pe *acl.ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%.40q: got rules %v, err %v; want a ParseError", b.text, rs != nil, err)
			continue
		}
		if rs != nil || pe.File != "bad.acl" || pe.Line != b.line || !strings.HasPrefix(err.Error(), "acl: bad.acl:") {
			t.Errorf("%.40q: got %v at line %d, want line %d", b.text, err, pe.Line, b.line)
		}
	}
}

func TestOpenReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acl")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := acl.Open(path); err == nil {
		t.Fatal("Open of a missing file succeeded")
	}
	write("topic read a/#\n")
	a, err := acl.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var _ auth.Authorizer = a
	run(t, a, []check{{anon, read, "a/x", true}, {anon, read, "b/x", false}})

	write("topic read b/#\n")
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	run(t, a, []check{{anon, read, "a/x", false}, {anon, read, "b/x", true}})

	write("topic read b/#\ntopic bogus c\n")
	err = a.Reload()
	var pe *acl.ParseError
	if !errors.As(err, &pe) || pe.Line != 2 || pe.File != path {
		t.Fatalf("Reload of a bad file: %v", err)
	}
	run(t, a, []check{{anon, read, "b/x", true}, {anon, read, "c", false}}) // old rules kept

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if a.Reload() == nil {
		t.Fatal("Reload of a missing file succeeded")
	}
	run(t, a, []check{{anon, read, "b/x", true}})
}

// TestReloadConcurrent decides while rules are swapped: each decision sees
// one rule set whole (the race detector checks the swap).
func TestReloadConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acl")
	if err := os.WriteFile(path, []byte("topic read a/#\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := acl.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	bad := make(chan string, 1)
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if !a.Authorize(anon.info(), auth.Request{Action: read, Topic: "a/x"}) {
					select {
					case bad <- "a/x refused during reloads":
					default:
					}
				}
			}
		})
	}
	for range 50 {
		if err := a.Reload(); err != nil {
			t.Error(err)
		}
	}
	close(done)
	wg.Wait()
	select {
	case msg := <-bad:
		t.Error(msg)
	default:
	}
}

// TestAdmin: a line "admin" in a user's section gives that user the
// admin role and no topic; anywhere else, or with words after it, it is
// an error naming the line; a Mosquitto file without it gives nobody the
// role.
func TestAdmin(t *testing.T) {
	rs := parse(t, "topic read public/#\nuser alice\nadmin\ntopic alice/#\nuser bob\ntopic bob/#\nuser carol\n  admin  \n")
	for _, c := range []struct {
		user string
		want bool
	}{{"alice", true}, {"carol", true}, {"bob", false}, {"", false}, {"mallory", false}} {
		if got := rs.Admin(c.user); got != c.want {
			t.Errorf("Admin(%q) = %v, want %v", c.user, got, c.want)
		}
	}
	if got := strings.Join(rs.Admins(), ","); got != "alice,carol" {
		t.Errorf("Admins() = %q", got)
	}
	run(t, rs, []check{
		{alice, pub, "alice/x", true},
		{alice, pub, "bob/x", false},
		{who{"carol", "c1"}, read, "carol/x", false}, // admin grants no topic
		{who{"carol", "c1"}, read, "public/x", false},
	})
	if plain := parse(t, "user alice\ntopic alice/#\n"); plain.Admin("alice") || len(plain.Admins()) != 0 {
		t.Error("a file without admin lines gives the role")
	}
	for _, b := range []struct {
		text string
		line int
	}{
		{"admin", 1},
		{"topic a\nadmin\nuser alice", 2},
		{"user alice\nadmin yes", 2},
		{"user alice\nadmins", 2},
	} {
		_, err := acl.Parse("bad.acl", strings.NewReader(b.text))
		var pe *acl.ParseError
		if !errors.As(err, &pe) || pe.Line != b.line {
			t.Errorf("%q: %v, want a ParseError at line %d", b.text, err, b.line)
		}
	}
}
