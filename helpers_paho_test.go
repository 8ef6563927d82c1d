package mqttd_test

import (
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// pahoConnect connects a paho 3.1.1 client; tune adjusts its options.
func pahoConnect(t *testing.T, addr, id string, tune func(*paho.ClientOptions)) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).
		SetAutoReconnect(false).SetConnectRetry(false).SetProtocolVersion(4).
		SetOrderMatters(false)
	if tune != nil {
		tune(o)
	}
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("paho connect %s: %v", id, tok.Error())
	}
	t.Cleanup(func() {
		if c.IsConnectionOpen() {
			c.Disconnect(100)
		}
	})
	return c
}

// wait waits for a paho token and fails the test on error or timeout.
func wait(t *testing.T, tok paho.Token) {
	t.Helper()
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatal("paho token timed out")
	}
	if err := tok.Error(); err != nil {
		t.Fatal(err)
	}
}

// collector gathers messages a paho subscription receives.
type collector struct {
	mu   sync.Mutex
	msgs []paho.Message
}

func (c *collector) handler(_ paho.Client, m paho.Message) {
	c.mu.Lock()
	c.msgs = append(c.msgs, m)
	c.mu.Unlock()
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.msgs)
}

func (c *collector) get(i int) paho.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.msgs[i]
}
