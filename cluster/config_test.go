package cluster

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	url := NATSConfig{URL: "nats://127.0.0.1:4222"}
	emb := func(e EmbeddedConfig) NATSConfig { return NATSConfig{Embedded: &e} }
	for _, c := range []struct {
		cfg  Config
		want string // prefix of the error; "" for none
	}{
		{Config{Name: "c1", NATS: url}, ""},
		{Config{Name: "c_1-A", NodeName: "host.example", NATS: NATSConfig{URL: "nats://a:1, tls://b:2,ws://c:3"}}, ""},
		{Config{Name: "c1", NATS: emb(EmbeddedConfig{})}, ""},
		{Config{Name: "c1", NATS: emb(EmbeddedConfig{Listen: "127.0.0.1:0", Cluster: "127.0.0.1:6222",
			Routes: []string{"nats-route://127.0.0.1:6223", "127.0.0.1:6224"}})}, ""},
		{Config{NATS: url}, "cluster.name: required"},
		{Config{Name: "a.b", NATS: url}, "cluster.name:"},
		{Config{Name: "a*", NATS: url}, "cluster.name:"},
		{Config{Name: ">", NATS: url}, "cluster.name:"},
		{Config{Name: "a b", NATS: url}, "cluster.name:"},
		{Config{Name: strings.Repeat("a", 65), NATS: url}, "cluster.name:"},
		{Config{Name: "c1", NodeName: "a b", NATS: url}, "cluster.node_name:"},
		{Config{Name: "c1", NodeName: strings.Repeat("n", 129), NATS: url}, "cluster.node_name:"},
		{Config{Name: "c1"}, "cluster.nats: set url"},
		{Config{Name: "c1", NATS: NATSConfig{URL: "nats://a:1", Embedded: &EmbeddedConfig{}}}, "cluster.nats: url and embedded"},
		{Config{Name: "c1", NATS: NATSConfig{URL: "http://a:1"}}, "cluster.nats.url:"},
		{Config{Name: "c1", NATS: NATSConfig{URL: "nats://a:1,"}}, "cluster.nats.url:"},
		{Config{Name: "c1", NATS: NATSConfig{URL: "nats://%zz"}}, "cluster.nats.url:"},
		{Config{Name: "c1", NATS: emb(EmbeddedConfig{Listen: "127.0.0.1"})}, "cluster.nats.embedded.listen:"},
		{Config{Name: "c1", NATS: emb(EmbeddedConfig{Listen: "127.0.0.1:70000"})}, "cluster.nats.embedded.listen:"},
		{Config{Name: "c1", NATS: emb(EmbeddedConfig{Cluster: "x"})}, "cluster.nats.embedded.cluster:"},
		{Config{Name: "c1", NATS: emb(EmbeddedConfig{Routes: []string{"127.0.0.1:1"}})}, "cluster.nats.embedded.cluster: required"},
		{Config{Name: "c1", NATS: emb(EmbeddedConfig{Cluster: ":6222"})}, "cluster.nats.embedded.routes: required"},
		{Config{Name: "c1", Replicas: 6, NATS: NATSConfig{URL: "nats://a:1"}}, "cluster.replicas:"},
		{Config{Name: "c1", Replicas: -1, NATS: NATSConfig{URL: "nats://a:1"}}, "cluster.replicas:"},
		{Config{Name: "c1", NATS: emb(EmbeddedConfig{Cluster: ":6222", Routes: []string{"127.0.0.1:1", "h"}})}, "cluster.nats.embedded.routes[1]:"},
		{Config{Name: "c1", NATS: emb(EmbeddedConfig{Cluster: ":6222", Routes: []string{"http://h:1"}})}, "cluster.nats.embedded.routes[0]:"},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("%+v: error %v, want %q...", c.cfg, err, c.want)
		}
	}
}

func TestStartRefusesInvalidConfig(t *testing.T) {
	if _, err := Start(Config{Name: "a.b", NATS: NATSConfig{URL: "nats://127.0.0.1:1"}}, testLogger(t), nil); err == nil ||
		!strings.HasPrefix(err.Error(), "cluster.name:") {
		t.Fatalf("Start: %v, want the cluster.name error", err)
	}
	if _, err := Start(Config{Name: "c1", NATS: NATSConfig{URL: "nats://127.0.0.1:1"}}, testLogger(t), nil); err == nil ||
		!strings.Contains(err.Error(), "deliver") {
		t.Fatalf("Start without deliver: %v", err)
	}
}
