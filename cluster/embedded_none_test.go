//go:build !natsserver

package cluster

import (
	"strings"
	"testing"
)

func TestEmbeddedNeedsBuildTag(t *testing.T) {
	_, err := Start(Config{Name: "c1", NodeName: "n", NATS: NATSConfig{Embedded: &EmbeddedConfig{}}}, testLogger(t), func(*Message) {})
	if err == nil || !strings.Contains(err.Error(), "natsserver") || !strings.Contains(err.Error(), "cluster.nats.url") {
		t.Fatalf("Start with embedded in a build without the tag: %v", err)
	}
}
