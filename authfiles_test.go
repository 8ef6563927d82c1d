package mqttd_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho5pkg "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd"
	"mqttd/packets"
)

// TestPasswordFile checks logins against a password file: the right
// password is let in; a wrong one and an unknown user are refused alike
// (3.1.1 CONNACK 4, 5.0 0x86); an anonymous client is refused once there
// is a password file, even on a loopback listener (3.1.1 5, 5.0 0x87).
// Each refusal is counted.
func TestPasswordFile(t *testing.T) {
	pw := writePasswords(t, t.TempDir(), "alice", "bob")
	srv, addr := startServer(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{PasswordFile: pw}}})
	for _, v := range versions {
		rc := connectAs(t, addr, v, as("a-"+versionName(v), "alice", "pw-alice"))
		rc.ping()
	}
	refused := 0
	for _, v := range versions {
		expectRefused(t, addr, v, as("x", "alice", "pw-bob"), refusedCode(v, true))
		expectRefused(t, addr, v, as("x", "mallory", "pw-mallory"), refusedCode(v, true))
		expectRefused(t, addr, v, as("x", "", ""), refusedCode(v, false))
		refused += 3
	}
	if n := srv.Stats().AuthFailures; n != uint64(refused) {
		t.Errorf("%d auth failures counted, want %d", n, refused)
	}
	// The failures slowed this address down; the right password still
	// gets in, and clears that.
	connectAs(t, addr, packets.V311, as("b", "bob", "pw-bob")).ping()
}

// TestAnonymousDefaults checks Mosquitto 2's default: anonymous clients
// are let in on a loopback listener only; one other machines reach
// refuses them (and, with no password file to check it, any username),
// unless allow_anonymous says true; allow_anonymous false refuses them on
// loopback too.
func TestAnonymousDefaults(t *testing.T) {
	yes, no := true, false
	_, local := startServer(t, mqttd.Options{})
	connectAs(t, local, packets.V311, as("anon", "", "")).ping()

	_, wide := startWide(t, mqttd.Options{})
	for _, v := range versions {
		expectRefused(t, wide, v, as("anon", "", ""), refusedCode(v, false))
		expectRefused(t, wide, v, as("named", "alice", "anything"), refusedCode(v, false))
	}

	_, open := startWide(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{AllowAnonymous: &yes}}})
	connectAs(t, open, packets.V5, as("anon", "", "")).ping()

	_, closed := startServer(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{AllowAnonymous: &no}}})
	expectRefused(t, closed, packets.V311, as("anon", "", ""), packets.ConnRefusedNotAuthorized)

	// A password file on the wide listener lets its users in, and
	// anonymous clients still not.
	pw := writePasswords(t, t.TempDir(), "alice")
	_, users := startWide(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{PasswordFile: pw}}})
	connectAs(t, users, packets.V5, as("alice", "alice", "pw-alice")).ping()
	expectRefused(t, users, packets.V5, as("anon", "", ""), packets.NotAuthorized)
}

// aclServer runs a broker with testACL (anonymous clients and any
// username are let in on its loopback listener) and returns it, its
// address and the ACL file's path.
func aclServer(t *testing.T, opts mqttd.Options) (*mqttd.Server, string, string) {
	t.Helper()
	aclFile := writeFile(t, t.TempDir(), "acl", testACL)
	opts.Auth.ACLFile = aclFile
	b := startBroker(t, opts)
	return b.srv, b.addr, aclFile
}

// TestACLPublishAndSubscribe checks the ACL on PUBLISH and SUBSCRIBE in
// both versions: a denied publish gets 0x87 in 5.0 and is acknowledged
// and dropped in 3.1.1; a denied filter gets 0x87 in 5.0 and 0x80 in
// 3.1.1, a shared subscription is decided on its filter, and # is not
// granted to a client that may read only part of the tree.
func TestACLPublishAndSubscribe(t *testing.T) {
	_, addr, _ := aclServer(t, mqttd.Options{})
	spy := connectAs(t, addr, packets.V311, as("spy", "spy", ""))
	if codes := subscribe(spy, packets.Subscription{Filter: "#"}); codes[0] != 0 {
		t.Fatalf("spy SUBACK %v", codes)
	}
	for _, v := range versions {
		alice := connectAs(t, addr, v, as("alice-"+versionName(v), "alice", ""))
		if code := publishQoS1(alice, 1, "sensors/temp", false); code != packets.Success {
			t.Errorf("%s: allowed publish: PUBACK %#x", versionName(v), byte(code))
		}
		expectPublish(spy, "sensors/temp")
		want := packets.Success // 3.1.1: acknowledged, dropped
		if v == packets.V5 {
			want = packets.NotAuthorized
		}
		for i, topic := range []string{"sensors/secret", "other/x"} {
			if code := publishQoS1(alice, uint16(2+i), topic, false); code != want {
				t.Errorf("%s: denied publish to %s: PUBACK %#x, want %#x", versionName(v), topic, byte(code), byte(want))
			}
		}
		alice.send(&packets.Publish{Topic: "other/qos0", Payload: []byte("x")})
		expectNothing(spy)

		denied := packets.SubackFailure
		if v == packets.V5 {
			denied = packets.NotAuthorized
		}
		codes := subscribe(alice, packets.Subscription{Filter: "sensors/#", Options: packets.SubOptions{QoS: 1}},
			packets.Subscription{Filter: "cmd/#"}, packets.Subscription{Filter: "$share/g/cmd/#"},
			packets.Subscription{Filter: "#"}, packets.Subscription{Filter: "$share/g/#"},
			packets.Subscription{Filter: "sensors/secret"}, packets.Subscription{Filter: "devices/alice/#"})
		wantCodes := []packets.ReasonCode{1, denied, denied, denied, denied, denied, 0}
		for i := range wantCodes {
			if codes[i] != wantCodes[i] {
				t.Errorf("%s: SUBACK codes %v, want %v", versionName(v), codes, wantCodes)
				break
			}
		}
	}
}

// TestACLDeliveries checks that each message is checked against the
// receiver's read access, not only its filter: retained messages sent on
// SUBSCRIBE, messages routed live, and those queued for a persistent
// session while it was away. $SYS topics reach nobody through # or
// $share/g/#.
func TestACLDeliveries(t *testing.T) {
	srv, addr, _ := aclServer(t, mqttd.Options{})
	writer := connectAs(t, addr, packets.V5, as("writer", "writer", ""))
	for i, topic := range []string{"sensors/secret", "sensors/a"} {
		publishQoS1(writer, uint16(1+i), topic, true)
	}
	alice := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "alice", UsernameFlag: true, Username: "alice"})
	subscribe(alice, packets.Subscription{Filter: "sensors/#", Options: packets.SubOptions{QoS: 1}})
	if p := expectPublish(alice, "sensors/a"); !p.Retain {
		t.Errorf("retained message sent without retain: %+v", p)
	}
	alice.send(&packets.Puback{PacketID: 1})
	expectNothing(alice)

	publishQoS1(writer, 3, "sensors/secret", false)
	publishQoS1(writer, 4, "sensors/b", false)
	p := expectPublish(alice, "sensors/b")
	alice.send(&packets.Puback{PacketID: p.PacketID})
	expectNothing(alice)

	alice.send(&packets.Disconnect{})
	alice.expectClosed()
	publishQoS1(writer, 5, "sensors/secret", false)
	publishQoS1(writer, 6, "sensors/c", false)
	back := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "alice", UsernameFlag: true, Username: "alice"})
	p = expectPublish(back, "sensors/c")
	back.send(&packets.Puback{PacketID: p.PacketID})
	expectNothing(back)

	spy := connectAs(t, addr, packets.V5, as("spy", "spy", ""))
	codes := subscribe(spy, packets.Subscription{Filter: "#", Options: packets.SubOptions{RetainHandling: 2}},
		packets.Subscription{Filter: "$share/g/#"},
		packets.Subscription{Filter: "$SYS/#"})
	if codes[0] != 0 || codes[1] != 0 || codes[2] != packets.NotAuthorized {
		t.Errorf("spy SUBACK %v, want [0 0 0x87]: # does not cover $SYS", codes)
	}
	if err := srv.Publish("$SYS/broker/secret", []byte("x"), 0, false, nil); err != nil {
		t.Fatal(err)
	}
	expectNothing(spy)
	if n := srv.Stats().ReadDenied; n < 3 {
		t.Errorf("%d deliveries denied counted, want at least 3", n)
	}
}

// TestACLIdentitiesDoNotWiden checks that a username or client id with
// +, # or / cannot turn the pattern devices/%u/# into a wider one: such a
// client gets nothing from the patterns, and what others publish under
// devices/ does not reach it.
func TestACLIdentitiesDoNotWiden(t *testing.T) {
	_, addr, _ := aclServer(t, mqttd.Options{})
	writer := connectAs(t, addr, packets.V5, as("writer", "writer", ""))
	var watchers []*rawConn
	for i, name := range []string{"#", "+", "a/#", "bob/x"} {
		for _, cp := range []*packets.Connect{as("u"+string(rune('0'+i)), name, ""), as(name, "bob", "")} {
			rc := connectAs(t, addr, packets.V5, cp)
			codes := subscribe(rc, packets.Subscription{Filter: "devices/#"}, packets.Subscription{Filter: "devices/+/t"},
				packets.Subscription{Filter: "#"}, packets.Subscription{Filter: "$share/g/devices/#"})
			for j, code := range codes {
				if code != packets.NotAuthorized {
					t.Errorf("username %q client id %q: filter %d granted (%#x)", cp.Username, cp.ClientID, j, byte(code))
				}
			}
			watchers = append(watchers, rc)
		}
	}
	publishQoS1(writer, 1, "devices/bob/t", false)
	for _, rc := range watchers {
		expectNothing(rc)
	}
}

// TestACLWill checks a will against the ACL at CONNECT: one to a topic
// the client may not write refuses the client (3.1.1 5, 5.0 0x87), one it
// may write is accepted.
func TestACLWill(t *testing.T) {
	_, addr, _ := aclServer(t, mqttd.Options{})
	for _, v := range versions {
		cp := as("w", "alice", "")
		setWill(cp, "other/will")
		expectRefused(t, addr, v, cp, refusedCode(v, false))
		cp = as("w", "alice", "")
		setWill(cp, "sensors/will")
		connectAs(t, addr, v, cp).ping()
	}
}

// TestACLReload checks SIGHUP's reload (Server.Reload) of an ACL file:
// rules taken away revoke the subscriptions they granted, online and
// offline, and what was queued under the old rules is not delivered; a
// file that no longer parses keeps the rules in force.
func TestACLReload(t *testing.T) {
	srv, addr, aclFile := aclServer(t, mqttd.Options{})
	writer := connectAs(t, addr, packets.V5, as("writer", "writer", ""))
	online := connectAs(t, addr, packets.V5, as("online", "alice", ""))
	subscribe(online, packets.Subscription{Filter: "sensors/#", Options: packets.SubOptions{QoS: 1}})
	away := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "away", UsernameFlag: true, Username: "alice"})
	subscribe(away, packets.Subscription{Filter: "sensors/#", Options: packets.SubOptions{QoS: 1}})
	away.send(&packets.Disconnect{})
	away.expectClosed()
	publishQoS1(writer, 1, "sensors/queued", false)
	p := expectPublish(online, "sensors/queued")
	online.send(&packets.Puback{PacketID: p.PacketID})

	os.WriteFile(aclFile, []byte("user alice\ntopic \n"), 0o600) // "topic" without a filter: a parse error
	if err := srv.Reload(); err == nil || !strings.Contains(err.Error(), aclFile) {
		t.Fatalf("Reload of a broken ACL file: %v, want an error naming it", err)
	}
	publishQoS1(writer, 2, "sensors/still", false)
	p = expectPublish(online, "sensors/still")
	online.send(&packets.Puback{PacketID: p.PacketID})

	writeFile(t, filepath.Dir(aclFile), "acl", strings.Replace(testACL, "topic readwrite sensors/#", "topic write sensors/#", 1))
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := srv.Stats().SubscriptionsRevoked; n != 2 {
		t.Errorf("%d subscriptions revoked, want 2", n)
	}
	publishQoS1(writer, 3, "sensors/after", false)
	expectNothing(online)
	back := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "away", UsernameFlag: true, Username: "alice"})
	expectNothing(back)
	if codes := subscribe(back, packets.Subscription{Filter: "sensors/#"}); codes[0] != packets.SubackFailure {
		t.Errorf("SUBACK %v after the rule went, want 0x80", codes)
	}
}

// TestOtherUserSession checks that a session belongs to the username that
// created it: by default a CONNECT with its client id and another username
// is refused (3.1.1 5, 5.0 0x87) and the session stays its owner's; with
// other_user_session: replace the old session ends and the newcomer starts
// a fresh one, inheriting nothing.
func TestOtherUserSession(t *testing.T) {
	for _, mode := range []string{"", mqttd.OtherUserReplace} {
		t.Run("mode="+mode, func(t *testing.T) {
			srv, addr := startServer(t, mqttd.Options{Auth: mqttd.Auth{OtherUserSession: mode}})
			owner := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "dev", UsernameFlag: true, Username: "alice"})
			subscribe(owner, packets.Subscription{Filter: "t", Options: packets.SubOptions{QoS: 1}})
			owner.send(&packets.Disconnect{})
			owner.expectClosed()
			pub := connectAs(t, addr, packets.V311, as("pub", "", ""))
			publishQoS1(pub, 1, "t", false)

			thief := &packets.Connect{ClientID: "dev", UsernameFlag: true, Username: "mallory"}
			if mode == "" {
				for _, v := range versions {
					expectRefused(t, addr, v, thief, refusedCode(v, false))
				}
				back, ack := connectReply(t, addr, packets.V311, &packets.Connect{ClientID: "dev", UsernameFlag: true, Username: "alice"})
				if !ack.SessionPresent || ack.ReasonCode != 0 {
					t.Fatalf("owner's CONNACK %+v, want its session present", ack)
				}
				expectPublish(back, "t")
				return
			}
			rc, ack := connectReply(t, addr, packets.V5, thief)
			if ack.ReasonCode != 0 || ack.SessionPresent {
				t.Fatalf("CONNACK %+v, want a fresh session", ack)
			}
			expectNothing(rc)
			if st := srv.Stats(); st.Subscriptions != 0 {
				t.Errorf("%d subscriptions left of the replaced session", st.Subscriptions)
			}
		})
	}
}

// TestAuthMosquittoClients drives the files end to end with the Mosquitto
// clients and paho: a password file written by the real mosquitto_passwd
// and a Mosquitto ACL file taken as is. mosquitto_sub with the right
// password receives; with a wrong one, or none, it is refused; a publish
// the ACL denies is dropped; paho 3.1.1 (with a password) and paho.golang
// 5.0 get the same answers.
func TestAuthMosquittoClients(t *testing.T) {
	pwBin := needTool(t, "mosquitto_passwd")
	pubBin, subBin := needTool(t, "mosquitto_pub"), needTool(t, "mosquitto_sub")
	dir := t.TempDir()
	pw := filepath.Join(dir, "passwords")
	for i, u := range []string{"alice", "writer"} {
		args := []string{"-b", pw, u, "pw-" + u}
		if i == 0 {
			args = append([]string{"-c"}, args...)
		}
		if out, err := exec.Command(pwBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_passwd %v: %v\n%s", args, err, out)
		}
	}
	aclFile := writeFile(t, dir, "acl", testACL)
	_, addr := startServer(t, mqttd.Options{Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{PasswordFile: pw, ACLFile: aclFile}}})
	host, port, _ := strings.Cut(addr, ":")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := func(bin string, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, bin, append([]string{"-h", host, "-p", port, "-V", "mqttv311"}, args...)...)
	}
	for _, creds := range [][]string{{"-u", "alice", "-P", "wrong"}, {"-u", "mallory", "-P", "x"}, {}} {
		out, err := cmd(subBin, append(creds, "-t", "sensors/#", "-C", "1")...).CombinedOutput()
		if err == nil || !strings.Contains(strings.ToLower(string(out)), "connection refused") {
			t.Errorf("mosquitto_sub %v: %v, %q; want refused", creds, err, out)
		}
	}
	sub := cmd(subBin, "-u", "alice", "-P", "pw-alice", "-t", "sensors/#", "-q", "1", "-v", "-C", "2")
	out, err := sub.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(out)
	publish := func(topic string) {
		t.Helper()
		if out, err := cmd(pubBin, "-u", "writer", "-P", "pw-writer", "-t", topic, "-m", topic, "-q", "1").CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_pub %s: %v\n%s", topic, err, out)
		}
	}
	// The subscriber may not be subscribed yet: publish until it shows.
	deadline := time.Now().Add(10 * time.Second)
	first := make(chan string, 1)
	go func() {
		l, _ := lines.ReadString('\n')
		first <- l
	}()
	var got string
	for got == "" {
		publish("sensors/ready")
		select {
		case got = <-first:
		case <-time.After(100 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("mosquitto_sub got nothing within 10 s")
			}
		}
	}
	if got != "sensors/ready sensors/ready\n" {
		t.Fatalf("first line %q", got)
	}
	publish("sensors/secret") // denied to alice: not delivered
	if out, err := cmd(pubBin, "-u", "alice", "-P", "pw-alice", "-t", "sensors/ready", "-m", "from alice", "-q", "1").CombinedOutput(); err != nil {
		t.Fatalf("alice's publish: %v\n%s", err, out)
	}
	rest, err := io.ReadAll(lines)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Wait(); err != nil {
		t.Fatalf("mosquitto_sub: %v", err)
	}
	// Only sensors/ready lines: the secret was never sent, and -C 2 ends
	// at alice's own message, which follows it.
	if !strings.HasPrefix(string(rest), "sensors/ready") || strings.Contains(string(rest), "secret") {
		t.Errorf("mosquitto_sub then printed %q, want alice's message and not the secret", rest)
	}

	c := pahoConnect(t, addr, "paho-alice", func(o *paho.ClientOptions) { o.SetUsername("alice").SetPassword("pw-alice") })
	if tok := c.Subscribe("other/#", 1, nil); !tok.WaitTimeout(10 * time.Second) {
		t.Fatal("paho subscribe timed out")
	} else if st, ok := tok.(*paho.SubscribeToken); ok && st.Result()["other/#"] != 0x80 {
		t.Errorf("paho SUBACK %v, want 0x80 for a denied filter", st.Result())
	}
	bad := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("paho-bad").
		SetUsername("alice").SetPassword("wrong").SetAutoReconnect(false).SetConnectRetry(false))
	if tok := bad.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() == nil {
		t.Errorf("paho with a wrong password connected")
	}

	p5 := connect5(t, addr, &paho5pkg.Connect{ClientID: "paho5-alice", CleanStart: true, UsernameFlag: true, Username: "alice",
		PasswordFlag: true, Password: []byte("pw-alice")}, nil)
	if r := p5.publish(t, &paho5pkg.Publish{Topic: "other/x", QoS: 1, Payload: []byte("x")}); r.ReasonCode != 0x87 {
		t.Errorf("paho.golang publish to a denied topic: reason %#x, want 0x87", r.ReasonCode)
	}
}

// TestACLShareGroupPicksAReader: a share group whose members have
// different read access gives each message to a member that may read it,
// not to the one the round robin reached; with no such member, nobody.
func TestACLShareGroupPicksAReader(t *testing.T) {
	_, addr, _ := aclServer(t, mqttd.Options{})
	writer := connectAs(t, addr, packets.V5, as("writer", "writer", ""))
	group := packets.Subscription{Filter: "$share/g/sensors/#", Options: packets.SubOptions{QoS: 1}}
	alice := connectAs(t, addr, packets.V5, as("alice", "alice", "")) // denied sensors/secret
	spy := connectAs(t, addr, packets.V5, as("spy", "spy", ""))       // reads everything
	for _, rc := range []*rawConn{alice, spy} {
		if codes := subscribe(rc, group); codes[0] != 1 {
			t.Fatalf("SUBACK %v", codes)
		}
	}
	for i := range 4 {
		publishQoS1(writer, uint16(1+i), "sensors/secret", false)
		p := expectPublish(spy, "sensors/secret")
		spy.send(&packets.Puback{PacketID: p.PacketID})
	}
	expectNothing(alice)

	spy.send(&packets.Disconnect{})
	spy.expectClosed()
	publishQoS1(writer, 9, "sensors/secret", false)
	expectNothing(alice)
}
