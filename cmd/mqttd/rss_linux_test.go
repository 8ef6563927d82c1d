package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd/packets"
)

// rssBound is the most the broker's RSS may grow under a memory attack
// at its default settings: 64 MB, counted as 64 MiB.
const rssBound = 64 << 20

// TestBinaryRetainedRSS runs the real binary at its default settings
// (a data directory, durability sync, the GC policy of gc.go), sends it
// 200 retained messages of 1 MiB and then clears them: its resident set
// must grow by at most rssBound at the peak and after, while an ordinary
// client is served. The in-process attack tests measure the live heap;
// this measures what the operator sees: the garbage the collector lets
// stand, the pages of the bbolt file mapped in, and freed memory the
// runtime has not given back yet (right after the clearing, all of it:
// the idle release of gc.go comes later).
func TestBinaryRetainedRSS(t *testing.T) {
	const messages, size = 200, 1<<20 - 1024
	b := startBinary(t)
	pub := dialRaw5(t, b.addr, "retainer")
	pub.publish(t, "warmup", []byte("w"), true)
	pub.publish(t, "warmup", nil, true)
	base := b.rss(t)

	payload := bytes.Repeat([]byte("x"), size)
	refused := 0
	for i := range messages {
		if code := pub.publish(t, fmt.Sprintf("big/%03d", i), payload, true); code == packets.QuotaExceeded {
			refused++
		}
	}
	peak := b.rss(t)
	t.Logf("RSS %.1f MB at the start, %.1f MB after %d retained messages of 1 MiB (%d refused)",
		mib(base), mib(peak), messages, refused)
	if peak-base > rssBound {
		t.Errorf("RSS grew by %.1f MB with the retained messages, over %.1f", mib(peak-base), mib(rssBound))
	}
	ordinary(t, b.addr, "during")
	for i := range messages {
		pub.publish(t, fmt.Sprintf("big/%03d", i), nil, true)
	}
	ordinary(t, b.addr, "after")
	after := b.rss(t)
	t.Logf("RSS %.1f MB after they were cleared", mib(after))
	if after-base > rssBound {
		t.Errorf("RSS grew by %.1f MB after the retained messages were cleared, over %.1f", mib(after-base), mib(rssBound))
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// ordinary connects a paho 3.1.1 client, which subscribes at QoS 1,
// publishes at QoS 1 and must receive its own message.
func ordinary(t *testing.T, addr, phase string) {
	t.Helper()
	topic := "ordinary/" + phase
	got := make(chan string, 1)
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("ordinary-" + phase).
		SetAutoReconnect(false).SetProtocolVersion(4))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("ordinary client (%s): connect: %v", phase, tok.Error())
	}
	defer c.Disconnect(100)
	tok := c.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) {
		select {
		case got <- string(m.Payload()):
		default:
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("ordinary client (%s): subscribe: %v", phase, tok.Error())
	}
	c.Publish(topic, 1, false, phase)
	select {
	case m := <-got:
		if m != phase {
			t.Errorf("ordinary client (%s) received %q", phase, m)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("ordinary client (%s) did not receive its message", phase)
	}
}

// binary is the mqttd command running as a child process.
type binary struct {
	cmd  *exec.Cmd
	addr string
}

// startBinary builds the command and runs it on 127.0.0.1:0 with a data
// directory in t.TempDir() and its other settings at their defaults.
func startBinary(t *testing.T) *binary {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "mqttd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--metrics", "off", "--data-dir", filepath.Join(dir, "data"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrCh := make(chan string, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		listening := regexp.MustCompile(`MQTT listening on (127\.0\.0\.1:\d+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrCh <- m[1]:
				default:
				}
			}
		}
		cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	select {
	case addr := <-addrCh:
		return &binary{cmd: cmd, addr: addr}
	case <-exited:
		t.Fatal("mqttd exited before listening")
	case <-time.After(20 * time.Second):
		t.Fatal("mqttd did not say where it listens")
	}
	return nil
}

// rss reads the child's resident set from /proc.
func (b *binary) rss(t *testing.T) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB$`).FindSubmatch(status)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/%d/status", b.cmd.Process.Pid)
	}
	kb, err := strconv.ParseInt(string(m[1]), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return kb << 10
}

// raw5 is a raw MQTT 5.0 client that publishes at QoS 1 and waits for
// each PUBACK.
type raw5 struct {
	nc  net.Conn
	br  *bufio.Reader
	buf []byte
	id  uint16
}

func dialRaw5(t *testing.T, addr, id string) *raw5 {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(60 * time.Second))
	c := &raw5{nc: nc, br: bufio.NewReader(nc)}
	c.buf, _ = (&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, CleanStart: true, ClientID: id}).
		Append(c.buf, packets.V5)
	if _, err := nc.Write(c.buf); err != nil {
		t.Fatal(err)
	}
	if p, err := packets.ReadPacket(c.br, packets.V5, 0); err != nil {
		t.Fatal(err)
	} else if ack, ok := p.(*packets.Connack); !ok || ack.ReasonCode != packets.Success {
		t.Fatalf("CONNACK %+v", p)
	}
	return c
}

// publish sends one QoS 1 PUBLISH and returns its PUBACK's code.
func (c *raw5) publish(t *testing.T, topic string, payload []byte, retain bool) packets.ReasonCode {
	t.Helper()
	c.id++
	var err error
	c.buf, err = (&packets.Publish{Topic: topic, QoS: 1, Retain: retain, PacketID: c.id, Payload: payload}).
		Append(c.buf[:0], packets.V5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.nc.Write(c.buf); err != nil {
		t.Fatal(err)
	}
	p, err := packets.ReadPacket(c.br, packets.V5, 0)
	if err != nil {
		t.Fatal(err)
	}
	ack, ok := p.(*packets.Puback)
	if !ok || ack.PacketID != c.id {
		t.Fatalf("got %+v, want PUBACK %d", p, c.id)
	}
	return ack.ReasonCode
}
