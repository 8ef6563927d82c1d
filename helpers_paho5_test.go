package mqttd_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// paho5 is a connected paho.golang client and the messages it received.
type paho5 struct {
	c    *paho.Client
	nc   net.Conn
	ack  *paho.Connack
	msgs chan *paho.Publish
	errs chan error
}

func (p *paho5) subscribe(t *testing.T, filter string, qos byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sa, err := p.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
	if err != nil || sa.Reasons[0] != qos {
		t.Fatalf("subscribe %s: %v %+v", filter, err, sa)
	}
}

func (p *paho5) publish(t *testing.T, pb *paho.Publish) *paho.PublishResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := p.c.Publish(ctx, pb)
	if err != nil && r == nil {
		t.Fatalf("publish %s: %v", pb.Topic, err)
	}
	return r
}

// next returns the next message received, failing on a client error (the
// library refusing what the broker sent).
func (p *paho5) next(t *testing.T) *paho.Publish {
	t.Helper()
	select {
	case m := <-p.msgs:
		return m
	case err := <-p.errs:
		t.Fatalf("client error: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
	return nil
}

// connect5 connects a paho.golang client; tune adjusts its configuration
// and CONNECT before they are used.
func connect5(t *testing.T, addr string, cp *paho.Connect, tune func(*paho.ClientConfig)) *paho5 {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &paho5{nc: nc, msgs: make(chan *paho.Publish, 100), errs: make(chan error, 10)}
	cfg := paho.ClientConfig{
		Conn: nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			p.msgs <- pr.Packet
			return true, nil
		}},
		OnClientError: func(err error) {
			select {
			case p.errs <- err:
			default:
			}
		},
	}
	if tune != nil {
		tune(&cfg)
	}
	p.c = paho.NewClient(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cp.KeepAlive == 0 {
		cp.KeepAlive = 30
	}
	p.ack, err = p.c.Connect(ctx, cp)
	if err != nil {
		t.Fatalf("paho.golang connect %s: %v (%+v)", cp.ClientID, err, p.ack)
	}
	t.Cleanup(func() {
		p.c.Disconnect(&paho.Disconnect{})
		nc.Close()
	})
	return p
}
