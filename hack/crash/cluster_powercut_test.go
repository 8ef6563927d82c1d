//go:build linux && (amd64 || arm64)

package crash

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mqttd/internal/testutil"
	"mqttd/packets"
)

// TestClusterReplicatedPowerCut: three mqttd processes with replicated
// sessions, each with its embedded NATS server (JetStream, replicas 3);
// node 3's data directory, its bbolt file and its JetStream files, is on
// the power-cut filesystem. Each cycle node 3 is killed, every write it
// had not synced is thrown away, and it starts again, while a QoS 1 and a
// QoS 2 publisher go on: every persistent subscriber, wherever it
// reconnects, gets every message whose PUBACK or PUBCOMP its publisher
// got (runCycles). CLUSTER_CUTS sets the cycles (default 2).
func TestClusterReplicatedPowerCut(t *testing.T) {
	mnt, cut := powerCutDir(t)
	bin := natsBinary(t)
	var clientPorts, routePorts, routes []string
	for range 3 {
		clientPorts = append(clientPorts, fmt.Sprint(testutil.FreePort(t)))
		rp := fmt.Sprint(testutil.FreePort(t))
		routePorts = append(routePorts, rp)
		routes = append(routes, "127.0.0.1:"+rp)
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	dataDirs := []string{filepath.Join(dirs[0], "data"), filepath.Join(dirs[1], "data"), filepath.Join(mnt, "data")}
	// A node serves once its JetStream has the cluster's streams: the
	// first time, once the three servers elected their leaders.
	serving := func(i int, b *broker) {
		dialServedWithin(t, b.addr, connectPacket(packets.V311, fmt.Sprintf("probe%d", i+1), true), 60*time.Second).close(true)
	}
	restarted := false
	var started []string
	var runs []*broker
	t.Cleanup(func() {
		if t.Failed() {
			for i, b := range runs {
				t.Logf("%s's last output:\n%s", started[i], b.tail())
			}
		}
	})
	cn := newCycleNodes(func(i int) *broker {
		cfg := filepath.Join(dirs[i], "mqttd.yaml")
		yaml := fmt.Sprintf("cluster:\n  name: crash\n  node_name: n%d\n  node_timeout: %v\n  sessions: replicated\n"+
			"  nats:\n    embedded:\n      listen: 127.0.0.1:%s\n      cluster: 127.0.0.1:%s\n      routes: [%s]\n",
			i+1, nodeTimeout, clientPorts[i], routePorts[i], strings.Join(routes, ", "))
		if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		b := runBroker(t, exec.Command(bin, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
			"--data-dir", dataDirs[i], "--log-level", "warn", "--config", cfg))
		started, runs = append(started, fmt.Sprintf("n%d (run %d)", i+1, len(runs)+1)), append(runs, b)
		if restarted {
			serving(i, b)
		}
		return b
	})
	for i, b := range cn.nodes {
		serving(i, b)
	}
	restarted = true
	runCycles(t, cn, seeded(t), envInt(t, "CLUSTER_CUTS", 2), func() int {
		cn.kill(t, 2)
		cut()
		return 2
	})
}
