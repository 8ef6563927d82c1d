package mqttd_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd"
	"mqttd/auth"
)

// Example embeds a broker in a Go program: listen on a loopback port,
// serve, use it, and shut it down.
func Example() {
	srv, err := mqttd.New(mqttd.Options{})
	if err != nil {
		panic(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv.AddListener("embedded", l)
	go srv.Serve()

	got := make(chan string, 1)
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + l.Addr().String()).SetClientID("example"))
	c.Connect().Wait()
	c.Subscribe("greetings", 1, func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) }).Wait()
	c.Publish("greetings", 1, false, "hello from an embedded broker").Wait()
	fmt.Println(<-got)
	c.Disconnect(100)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	// Output: hello from an embedded broker
}

// tempOnly lets clients publish only under sensors/ and refuses shared
// subscriptions: an auth.Authorizer of the embedding program's own.
type tempOnly struct{ auth.AllowAll }

func (tempOnly) Authorize(_ auth.ClientInfo, r auth.Request) bool {
	switch r.Action {
	case auth.Publish, auth.Will:
		return strings.HasPrefix(r.Topic, "sensors/")
	case auth.Subscribe:
		return r.Group == ""
	}
	return false
}

// ExampleServer_Subscribe receives, in the embedding program, what
// clients publish, and publishes to them, with no network connection of
// its own; an Authorizer decides what clients may do.
func ExampleServer_Subscribe() {
	srv, err := mqttd.New(mqttd.Options{Authorizer: tempOnly{}})
	if err != nil {
		panic(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv.AddListener("embedded", l)
	go srv.Serve()

	got := make(chan string, 1)
	unsubscribe, err := srv.Subscribe("sensors/+/temp", func(m mqttd.Message) {
		got <- m.Topic + " " + string(m.Payload) // the handler must not block
	})
	if err != nil {
		panic(err)
	}
	defer unsubscribe()

	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + l.Addr().String()).SetClientID("thermometer"))
	c.Connect().Wait()
	c.Publish("sensors/kitchen/temp", 1, false, "21.5").Wait()
	fmt.Println(<-got)
	c.Disconnect(100)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	// Output: sensors/kitchen/temp 21.5
}
