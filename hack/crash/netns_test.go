//go:build linux

package crash

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mqttd/packets"
)

// A lab of network namespaces for the netsplit test: one namespace per
// mqttd node, each with a veth to a bridge in a hub namespace, so that
// cutting one veth cuts one node off the others. Every address is inside
// namespaces the lab made, so the subnet can be the same in every run;
// the namespaces' names are unique per run, so parallel or leftover runs
// do not collide.
//
// The test reaches each node through the node's own loopback: it dials
// from an OS thread switched into the node's namespace (inNetns). That
// path does not cross the hub, so the test keeps talking to a node while
// it is cut off from the others, and no listener is exposed beyond the
// namespace.

// labSubnet is the lab's subnet: node i is labSubnet + (i+1).
const labSubnet = "10.38.0."

// lab is one run's namespaces.
type lab struct {
	t   *testing.T
	id  string // unique per run: the namespaces' names start with it
	hub string
}

// labNode is one node's namespace.
type labNode struct {
	ns   string
	ip   string
	veth string // its veth's name in the hub namespace
}

// newLab makes the hub namespace and its bridge, or skips the test where
// network namespaces cannot be made; everything goes at the test's
// cleanup, even after a failure.
func newLab(t *testing.T) *lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("netsplit: needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("netsplit: needs ip (iproute2) for network namespaces")
	}
	sweepStaleLabs(t)
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	l := &lab{t: t, id: fmt.Sprintf("%s%d-%s", labPrefix, os.Getpid(), hex.EncodeToString(b[:]))}
	l.hub = l.id + "-hub"
	if out, err := exec.Command("ip", "netns", "add", l.hub).CombinedOutput(); err != nil {
		t.Skipf("netsplit: ip netns add: %v: %s", err, out)
	}
	l.cleanupNetns(l.hub)
	l.ip("-n", l.hub, "link", "set", "lo", "up")
	l.ip("-n", l.hub, "link", "add", "br0", "type", "bridge")
	l.ip("-n", l.hub, "link", "set", "br0", "up")
	return l
}

// labPrefix starts the names of the lab's namespaces, followed by the
// test process's id.
const labPrefix = "mqsplit-"

// sweepStaleLabs deletes the namespaces, and ends the processes in them,
// of labs whose test process is gone without its cleanup (killed): a
// lab of a test still running is left alone.
func sweepStaleLabs(t *testing.T) {
	t.Helper()
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), labPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		out, _ := exec.Command("ip", "netns", "pids", e.Name()).Output()
		for _, f := range strings.Fields(string(out)) {
			if p, err := strconv.Atoi(f); err == nil {
				_ = unix.Kill(p, unix.SIGKILL)
			}
		}
		if out, err := exec.Command("ip", "netns", "del", e.Name()).CombinedOutput(); err != nil {
			t.Logf("stale namespace %s not deleted: %v: %s", e.Name(), err, out)
		}
	}
}

// cleanupNetns deletes namespace ns at the test's cleanup.
func (l *lab) cleanupNetns(ns string) {
	l.t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			l.t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})
}

// ip runs ip(8) with args, failing the test if it fails.
func (l *lab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// node makes namespace number i (0, 1, ...) named after suffix, wired to
// the hub's bridge.
func (l *lab) node(i int, suffix string) *labNode {
	l.t.Helper()
	n := &labNode{ns: l.id + "-" + suffix, ip: fmt.Sprintf("%s%d", labSubnet, i+1), veth: "veth-" + suffix}
	l.ip("netns", "add", n.ns)
	l.cleanupNetns(n.ns)
	l.ip("-n", n.ns, "link", "set", "lo", "up")
	l.ip("-n", l.hub, "link", "add", n.veth, "type", "veth", "peer", "name", "eth0", "netns", n.ns)
	l.ip("-n", l.hub, "link", "set", n.veth, "master", "br0", "up")
	l.ip("-n", n.ns, "addr", "add", n.ip+"/24", "dev", "eth0")
	l.ip("-n", n.ns, "link", "set", "eth0", "up")
	var err error
	if nsErr := inNetns(n.ns, func() { err = os.WriteFile(tcpRetries2, []byte(labTCPRetries), 0o644) }); nsErr != nil || err != nil {
		l.t.Fatalf("%s in %s: %v %v", tcpRetries2, n.ns, nsErr, err)
	}
	return n
}

// A TCP connection with unacknowledged data ends after tcp_retries2
// retransmissions, 15 by default: about 15 minutes, while NATS takes a
// route for dead after two unanswered pings, 4 minutes. labTCPRetries (4)
// ends one in about 6 s: the NATS routes across a cut break within the
// split, as across a long netsplit, rather than hold what crosses them
// until it heals; and after it heals the servers route anew at once
// instead of waiting for TCP's retransmission timer, doubled at each try.
// The setting is the namespace's own.
const (
	tcpRetries2   = "/proc/sys/net/ipv4/tcp_retries2"
	labTCPRetries = "4"
)

// cut takes n's veth down on the hub's side: n reaches no other node, and
// no packet tells either side so.
func (l *lab) cut(n *labNode) {
	l.t.Helper()
	l.ip("-n", l.hub, "link", "set", n.veth, "down")
}

// heal brings n's veth up again.
func (l *lab) heal(n *labNode) {
	l.t.Helper()
	l.ip("-n", l.hub, "link", "set", n.veth, "up")
}

// inNetns runs f on an OS thread switched into namespace ns: the sockets
// f opens belong to ns for their whole life, whichever thread uses them
// later. It runs on a goroutine of its own, so that a thread that cannot
// switch back dies with it (it stays locked) rather than serve others.
func inNetns(ns string, f func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(orig)
		target, err := unix.Open(filepath.Join("/run/netns", ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		f()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns back from %s: %w", ns, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- nil
	}()
	return <-errc
}

// dial opens a TCP connection to addr from inside n's namespace.
func (n *labNode) dial(addr string) (net.Conn, error) {
	var nc net.Conn
	var err error
	if nsErr := inNetns(n.ns, func() { nc, err = net.DialTimeout("tcp", addr, ioTimeout) }); nsErr != nil {
		return nil, nsErr
	}
	return nc, err
}

// nsBroker is an mqttd node running in a lab namespace, listening for
// MQTT and HTTP on the namespace's loopback.
type nsBroker struct {
	*broker
	net  *labNode
	name string
	http *http.Client
}

// Where every node listens inside its own namespace.
const (
	nsMQTT    = "127.0.0.1:1883"
	nsMetrics = "127.0.0.1:9100"
	nsNATS    = "127.0.0.1:4222"
	nsRoute   = 6222
)

// startNSNode runs bin (an mqttd built with -tags natsserver) in n's
// namespace as node name of cluster "split", its embedded NATS server
// routed to peers, with node_timeout timeout; extra are more lines of its
// cluster block.
func startNSNode(t *testing.T, bin string, n *labNode, name string, peers []*labNode, timeout time.Duration, extra ...string) *nsBroker {
	t.Helper()
	dir := t.TempDir()
	var routes []string
	for _, p := range peers {
		routes = append(routes, fmt.Sprintf("%s:%d", p.ip, nsRoute))
	}
	yaml := fmt.Sprintf("cluster:\n  name: split\n  node_name: %s\n  node_timeout: %v\n  nats:\n    embedded:\n"+
		"      listen: %s\n      cluster: %s:%d\n      routes: [%s]\n",
		name, timeout, nsNATS, n.ip, nsRoute, strings.Join(routes, ", "))
	for _, line := range extra {
		yaml += "  " + line + "\n"
	}
	cfg := filepath.Join(dir, "mqttd.yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", n.ns, bin, "--listen", nsMQTT, "--metrics", nsMetrics,
		"--data-dir", filepath.Join(dir, "data"), "--log-level", "warn", "--config", cfg)
	b := &nsBroker{broker: runBroker(t, cmd), net: n, name: name}
	b.http = &http.Client{Timeout: ioTimeout, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(_ context.Context, _, addr string) (net.Conn, error) {
			return n.dial(addr)
		},
	}}
	return b
}

// connect sends CONNECT to the node and returns the connection once
// accepted, with its session present flag.
func (b *nsBroker) connect(v packets.Version, cp *packets.Connect) (*conn, bool, error) {
	nc, err := b.net.dial(nsMQTT)
	if err != nil {
		return nil, false, err
	}
	return connectOver(nc, v, cp)
}

// get fetches path from the node's metrics listener.
func (b *nsBroker) get(path string) (int, []byte, error) {
	resp, err := b.http.Get("http://" + nsMetrics + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, body, err
}

// natsBinary is mqttd built with the embedded NATS server, or
// CRASH_MQTTD_NATS_BIN.
func natsBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("CRASH_MQTTD_NATS_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "mqttd-nats")
	if out, err := exec.Command("go", "build", "-tags", "natsserver", "-o", bin, "mqttd/cmd/mqttd").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags natsserver mqttd/cmd/mqttd: %v\n%s", err, out)
	}
	return bin
}
