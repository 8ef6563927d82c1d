package e2e_test

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// The real mqttd binary and paho clients, for the dashboard's tests.

// brokerAddrs are where a started mqttd listens.
type brokerAddrs struct{ tcp, ws, api string }

// buildMQTTD builds the mqttd binary and returns its path.
func buildMQTTD(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mqttd")
	if out, err := exec.Command("go", "build", "-o", bin, "mqttd/cmd/mqttd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startMQTTD runs the mqttd binary with a TCP listener, with ws a
// WebSocket listener (path /dash-ws, which the dashboard must take from
// the overview), and the management API, each on 127.0.0.1 port 0, and
// the extra flags given; it reads their addresses from its banner, and
// stops it (SIGTERM) at cleanup.
func startMQTTD(t *testing.T, bin string, ws bool, extra ...string) brokerAddrs {
	t.Helper()
	args := []string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--data-dir", t.TempDir()}
	if ws {
		args = append(args, "--listen", "ws://127.0.0.1:0/dash-ws")
	}
	cmd := exec.Command(bin, append(args, extra...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines, exited := make(chan string, 100), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads the log past the banner
			}
		}
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Error("mqttd did not stop within 10 s of SIGTERM")
		}
	})
	return readBanner(t, lines, exited, ws)
}

// readBanner reads where mqttd listens from the lines of its banner;
// with ws, a WebSocket listener's address too.
func readBanner(t *testing.T, lines <-chan string, exited <-chan struct{}, ws bool) brokerAddrs {
	t.Helper()
	var a brokerAddrs
	find := map[*regexp.Regexp]*string{
		regexp.MustCompile(`MQTT listening on (127\.0\.0\.1:\d+) \(tcp\)`): &a.tcp,
		regexp.MustCompile(`dashboard on http://(127\.0\.0\.1:\d+)/$`):     &a.api,
	}
	if ws {
		find[regexp.MustCompile(`MQTT listening on (127\.0\.0\.1:\d+) \(ws://`)] = &a.ws
	}
	timeout := time.After(20 * time.Second)
	for a.tcp == "" || a.api == "" || ws && a.ws == "" {
		select {
		case line := <-lines:
			for re, to := range find {
				if m := re.FindStringSubmatch(line); m != nil {
					*to = m[1]
				}
			}
		case <-exited:
			t.Fatal("mqttd exited before saying where it listens")
		case <-timeout:
			t.Fatalf("mqttd did not say where it listens within 20 s: %+v", a)
		}
	}
	return a
}

// pahoClient connects a paho client with id to addr; lost, when not nil,
// gets the error of a connection the broker ended.
func pahoClient(t *testing.T, addr, id string, lost chan<- error) paho.Client {
	t.Helper()
	return pahoLogin(t, addr, id, "", "", lost)
}

// pahoLogin is pahoClient with a username and password.
func pahoLogin(t *testing.T, addr, id, user, password string, lost chan<- error) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetAutoReconnect(false).
		SetUsername(user).SetPassword(password)
	if lost != nil {
		o.SetConnectionLostHandler(func(_ paho.Client, err error) { lost <- err })
	}
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho %s: connect: %v", id, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

func publish(t *testing.T, c paho.Client, topic, payload string) {
	t.Helper()
	if tok := c.Publish(topic, 0, false, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho publish: %v", tok.Error())
	}
}

// offlineSubscriber leaves a persistent session for id, subscribed to
// filter at QoS 1, without a connection: it queues what filter gets.
func offlineSubscriber(t *testing.T, addr, id, filter string) {
	t.Helper()
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).
		SetCleanSession(false).SetAutoReconnect(false))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho %s: connect: %v", id, tok.Error())
	}
	if tok := c.Subscribe(filter, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho %s: subscribe: %v", id, tok.Error())
	}
	c.Disconnect(100)
}
