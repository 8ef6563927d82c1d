package mqttd_test

import (
	"context"
	"crypto/subtle"
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

// deviceTokens is an embedding program's own accounts: each device's
// token, by username. Devices may use only their own topics.
type deviceTokens map[string]string

// Authenticate lets in a device that gives its token as its password.
func (d deviceTokens) Authenticate(c auth.ClientInfo, password []byte) error {
	token, ok := d[c.Username]
	if !ok || subtle.ConstantTimeCompare([]byte(token), password) != 1 {
		return auth.ErrBadCredentials
	}
	return nil
}

// Authorize keeps each device under devices/<username>/.
func (d deviceTokens) Authorize(c auth.ClientInfo, r auth.Request) bool {
	return strings.HasPrefix(r.Topic, "devices/"+c.Username+"/")
}

// ExampleOptions_customAuth plugs a program's own accounts in with
// Options.Authenticator and Options.Authorizer, in place of the password
// and ACL files of Options.Auth.
func ExampleOptions_customAuth() {
	tokens := deviceTokens{"pump-1": "s3cr3t"}
	srv, err := mqttd.New(mqttd.Options{Authenticator: tokens, Authorizer: tokens})
	if err != nil {
		panic(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv.AddListener("embedded", l)
	go srv.Serve()

	for _, token := range []string{"guess", "s3cr3t"} {
		c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + l.Addr().String()).SetClientID("pump-1").
			SetUsername("pump-1").SetPassword(token).SetAutoReconnect(false).SetConnectRetry(false))
		tok := c.Connect()
		tok.Wait()
		fmt.Printf("token %q: connected %v\n", token, tok.Error() == nil)
		if tok.Error() == nil {
			sub := c.Subscribe("devices/pump-2/#", 1, nil)
			sub.Wait()
			fmt.Println("subscribing to another device's topics refused:", sub.(*paho.SubscribeToken).Result()["devices/pump-2/#"] == 0x80)
			c.Disconnect(100)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	// Output:
	// token "guess": connected false
	// token "s3cr3t": connected true
	// subscribing to another device's topics refused: true
}
