package mqttd_test

import (
	"context"
	"fmt"
	"net"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"mqttd"
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
