package mqttd_test

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho5pkg "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd"
)

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

func TestMosquittoClients(t *testing.T) {
	pubBin, subBin := needTool(t, "mosquitto_pub"), needTool(t, "mosquitto_sub")
	_, addr := startServer(t, mqttd.Options{})
	host, port, _ := strings.Cut(addr, ":")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, ver := range []string{"mqttv31", "mqttv311"} {
		t.Run(ver, func(t *testing.T) {
			// A retained message is set first, so the subscriber's first
			// message proves it is subscribed before the live ones are sent.
			run := func(bin string, args ...string) {
				t.Helper()
				out, err := exec.CommandContext(ctx, bin, append([]string{"-h", host, "-p", port, "-V", ver}, args...)...).CombinedOutput()
				if err != nil {
					t.Fatalf("%s %v: %v\n%s", bin, args, err, out)
				}
			}
			topic := "mosq/" + ver
			run(pubBin, "-t", topic+"/ready", "-m", "ready", "-r", "-q", "1")
			sub := exec.CommandContext(ctx, subBin, "-h", host, "-p", port, "-V", ver, "-t", topic+"/#", "-q", "2", "-v", "-C", "4")
			out, err := sub.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Start(); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewReader(out)
			if first, err := lines.ReadString('\n'); err != nil || first != topic+"/ready ready\n" {
				t.Fatalf("subscriber's first line %q (%v)", first, err)
			}
			for q := range 3 {
				run(pubBin, "-t", topic+"/q", "-m", "qos"+string(rune('0'+q)), "-q", string(rune('0'+q)))
			}
			rest, err := io.ReadAll(lines)
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Wait(); err != nil {
				t.Fatalf("mosquitto_sub: %v", err)
			}
			want := topic + "/q qos0\n" + topic + "/q qos1\n" + topic + "/q qos2\n"
			if got := string(rest); got != want {
				t.Errorf("mosquitto_sub printed %q, want %q", got, want)
			}
		})
	}
}
