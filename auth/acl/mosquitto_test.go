package acl_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"mqttd/auth"
	"mqttd/auth/acl"
	"mqttd/internal/testutil"
	"mqttd/topictrie"
)

// compatACL exercises sections, deny precedence, the client's section
// deciding before the patterns, %u and %c, and $SYS.
const compatACL = `# anonymous clients
topic read public/#
topic deny public/hidden

user alice
topic readwrite alice/#
topic deny alice/secret
topic write public/#
topic read $SYS/broker/version

user bob
topic read shared/#

user admin
topic readwrite #

pattern readwrite devices/%u/#
pattern read clients/%c/#
pattern deny shared/%c/#
`

// retainedTopics are set by admin before the subscribers come.
var retainedTopics = []string{
	"public/a", "public/hidden", "alice/x", "alice/secret", "devices/carol/x",
	"devices/alice/x", "clients/c1/x", "clients/x/y", "shared/b1/x", "shared/b2/x", "other/x",
}

// mosquittoTools returns the broker and its clients, skipping if any is
// missing.
func mosquittoTools(t *testing.T) (broker, pub, sub string) {
	t.Helper()
	var paths []string
	for _, name := range []string{"/usr/sbin/mosquitto", "mosquitto_pub", "mosquitto_sub"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("%s not installed (apt-get install mosquitto mosquitto-clients)", name)
		}
		paths = append(paths, p)
	}
	return paths[0], paths[1], paths[2]
}

// startMosquitto runs the broker with aclPath on a free loopback port and
// returns the port once it accepts connections.
func startMosquitto(t *testing.T, ctx context.Context, bin, aclPath string) string {
	t.Helper()
	port := strconv.Itoa(testutil.FreePort(t))
	conf := filepath.Join(t.TempDir(), "mosquitto.conf")
	// "user root" keeps a broker started as root from dropping to the
	// mosquitto user, who could not read the test's private directory; run
	// as anyone else it has no effect.
	text := fmt.Sprintf("per_listener_settings false\nallow_anonymous true\npersistence false\nuser root\nacl_file %s\nlistener %s 127.0.0.1\n", aclPath, port)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	cmd := exec.CommandContext(ctx, bin, "-c", conf)
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
		if err == nil {
			c.Close()
			return port
		}
		select {
		case <-exited:
			t.Fatalf("mosquitto exited: %v\n%s", waitErr, log.String())
		case <-deadline:
			t.Fatalf("mosquitto not listening on %s after 10s\n%s", port, log.String())
		case <-tick.C:
		}
	}
}

// clientArgs are the connection arguments for a client.
func clientArgs(port string, c auth.ClientInfo) []string {
	args := []string{"-h", "127.0.0.1", "-p", port, "-V", "mqttv311", "-i", c.ClientID}
	if c.Username != "" {
		args = append(args, "-u", c.Username)
	}
	return args
}

// TestMosquittoCompat runs the real Mosquitto with the same acl_file and
// checks that what its clients receive is what this package's decisions
// say. Subscribe decisions are not compared: Mosquitto grants every
// subscription and filters each message (see the package documentation).
// Identities with / are left out for the same reason.
func TestMosquittoCompat(t *testing.T) {
	broker, pubBin, subBin := mosquittoTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	aclPath := filepath.Join(t.TempDir(), "acl")
	if err := os.WriteFile(aclPath, []byte(compatACL), 0o600); err != nil {
		t.Fatal(err)
	}
	az, err := acl.Open(aclPath)
	if err != nil {
		t.Fatal(err)
	}
	port := startMosquitto(t, ctx, broker, aclPath)
	admin := auth.ClientInfo{Username: "admin", ClientID: "admin"}
	publish := func(c auth.ClientInfo, topic, payload string, retain bool) {
		t.Helper()
		args := append(clientArgs(port, c), "-t", topic, "-m", payload, "-q", "1")
		if retain {
			args = append(args, "-r")
		}
		if out, err := exec.CommandContext(ctx, pubBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_pub %v: %v\n%s", args, err, out)
		}
	}
	for _, topic := range retainedTopics {
		publish(admin, topic, "m", true)
	}

	t.Run("read", func(t *testing.T) {
		for _, c := range []auth.ClientInfo{
			{ClientID: "anon1"},
			{Username: "alice", ClientID: "a1"},
			{Username: "bob", ClientID: "b1"},
			{Username: "carol", ClientID: "c1"},
			{Username: "#", ClientID: "c1"},
			{Username: "+", ClientID: "c1"},
			{Username: "carol", ClientID: "#"},
			{ClientID: "+"},
		} {
			// One at a time: several share client id c1, and Mosquitto
			// would have each take the others' sessions over (seen as a
			// subscriber getting the retained messages twice).
			t.Run(c.Username+"_"+c.ClientID, func(t *testing.T) {
				var want []string
				for _, topic := range append(slices.Clone(retainedTopics), "$SYS/broker/version") {
					if topictrie.Matches("#", topic) || topic == "$SYS/broker/version" {
						if az.Authorize(c, auth.Request{Action: auth.Read, Topic: topic}) {
							want = append(want, topic)
						}
					}
				}
				got := receive(t, ctx, subBin, port, c)
				t.Logf("delivered %q", got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("mosquitto delivered %q, this package allows %q", got, want)
				}
			})
		}
	})

	t.Run("write", func(t *testing.T) {
		watch := exec.CommandContext(ctx, subBin, append(clientArgs(port, auth.ClientInfo{Username: "admin", ClientID: "watch"}), "-t", "#", "-v", "-q", "1")...)
		out, err := watch.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := watch.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = watch.Process.Kill()
			_ = watch.Wait()
		}()
		lines := bufio.NewScanner(out)
		// The retained messages arrive first: the watcher is subscribed.
		for range retainedTopics {
			if !lines.Scan() {
				t.Fatalf("watcher ended before the retained messages: %v", lines.Err())
			}
		}
		cases := []struct {
			c     auth.ClientInfo
			topic string
		}{
			{auth.ClientInfo{Username: "alice", ClientID: "a1"}, "alice/x"},
			{auth.ClientInfo{Username: "alice", ClientID: "a1"}, "alice/secret"},
			{auth.ClientInfo{Username: "alice", ClientID: "a1"}, "public/a"},
			{auth.ClientInfo{ClientID: "anon1"}, "public/a"},
			{auth.ClientInfo{Username: "carol", ClientID: "c1"}, "devices/carol/y"},
			{auth.ClientInfo{Username: "carol", ClientID: "c1"}, "devices/alice/y"},
			{auth.ClientInfo{Username: "carol", ClientID: "c1"}, "clients/c1/y"},
			{auth.ClientInfo{Username: "#", ClientID: "c2"}, "devices/x/y"},
			{auth.ClientInfo{Username: "bob", ClientID: "b1"}, "shared/b1/y"},
		}
		want := map[string]bool{}
		for i, pc := range cases {
			payload := "case" + strconv.Itoa(i)
			publish(pc.c, pc.topic, payload, false)
			want[pc.topic+" "+payload] = az.Authorize(pc.c, auth.Request{Action: auth.Publish, Topic: pc.topic})
		}
		// Mosquitto routes a QoS 1 message before its PUBACK, so once the
		// marker arrives everything allowed before it has arrived too.
		publish(admin, "end", "end", false)
		got := map[string]bool{}
		for lines.Scan() && lines.Text() != "end end" {
			got[lines.Text()] = true
		}
		for line, allow := range want {
			if got[line] != allow {
				t.Errorf("%s: mosquitto delivered %v, this package allows %v", line, got[line], allow)
			}
		}
	})
}

// receive subscribes c to # and $SYS/broker/version for two seconds and
// returns the topics it got, sorted.
func receive(t *testing.T, ctx context.Context, subBin, port string, c auth.ClientInfo) []string {
	t.Helper()
	args := append(clientArgs(port, c), "-t", "#", "-t", "$SYS/broker/version", "-v", "-W", "2")
	cmd := exec.CommandContext(ctx, subBin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	// -W ends mosquitto_sub with status 27 and "Timed out" when the time
	// is up; anything else is a failure to connect or subscribe.
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 27 || strings.TrimSpace(stderr.String()) != "Timed out" {
		t.Fatalf("mosquitto_sub %v: %v\n%s", args, err, stderr.String())
	}
	var topics []string
	for line := range strings.Lines(string(out)) {
		topic, _, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		topics = append(topics, topic)
	}
	slices.Sort(topics)
	return topics
}
