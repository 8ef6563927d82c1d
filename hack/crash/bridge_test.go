package crash

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"mqttd"
)

// The bridge crash tests of issue 37: a gateway mqttd (the binary, as a
// child process) bridges q1/# and q2/# out to a remote broker. With the
// uplink down, local publishers send 10,000 QoS 1 and 2,000 QoS 2
// messages while the gateway is killed once; then the remote comes back
// and the gateway is killed once more while its queue drains to it. Every
// message a local publisher saw acknowledged must reach the remote's
// persistent subscriber, QoS 2 exactly once, in order per topic.

const (
	bridgeQoS1Pubs, bridgeQoS1Msgs = 4, 2500 // 10,000 QoS 1 messages
	bridgeQoS2Pubs, bridgeQoS2Msgs = 2, 1000 // 2,000 QoS 2 messages
	// bridgeWindow is each publisher's window of messages in flight.
	bridgeWindow = 32
	// bridgeWait bounds each of the scenario's waits, and the clients.
	bridgeWait = 30 * time.Second
)

// TestBridgeSurvivesSIGKILL kills the gateway with SIGKILL twice: while
// its publishers send with the uplink down, and while its queue drains
// to the remote that came back (CRASH_CYCLES times: a campaign).
func TestBridgeSurvivesSIGKILL(t *testing.T) {
	runBridgeScenario(t, t.TempDir(), func(t *testing.T, b *broker) {
		t.Helper()
		b.stop(t, syscall.SIGKILL)
	})
}

// runBridgeScenario runs the bridge scenario with the gateway's data in
// dataDir, stopping it each time with crash, which leaves dataDir ready
// for the restart.
func runBridgeScenario(t *testing.T, dataDir string, crash func(*testing.T, *broker)) {
	t.Helper()
	began := time.Now()
	rng := seeded(t)
	remote := newCloud(t)
	remote.start(t)
	sub := &cloudSub{id: "cloud-sub", addr: remote.addr}
	sub.join(t)
	remote.stop()

	g := &gateway{dataDir: dataDir, cfg: bridgeConfig(t, remote.addr), crash: crash}
	g.start(t)
	cs := startBridgeClients(t, g.book)
	uplinkDown(t, g, cs, rng)
	t.Logf("outage over after %s", time.Since(began).Round(time.Millisecond))
	remote.start(t)
	st := draining(t, g, cs, rng)
	t.Logf("drained after %s: %d forwarded since the last restart, dropped %v",
		time.Since(began).Round(time.Millisecond), st.ForwardedOut, st.Dropped)
	for reason, n := range st.Dropped {
		if n > 0 {
			t.Errorf("the bridge dropped %d messages (%s) since its last restart, with max_queued_messages above the total", n, reason)
		}
	}

	sub.read(t, cs.acked())
	cs.stop()
	check(t, cs.pubs, []*subscriber{cs.local})
	checkCloud(t, cs.pubs, sub)
	t.Logf("took %s", time.Since(began).Round(time.Millisecond))
}

// uplinkDown is the outage: the publishers send their messages and the
// gateway is killed when it has taken a random share of them, as its
// local subscriber sees them (not the bridge's queue, so that a queue
// that stops growing fails the checks, not this wait).
func uplinkDown(t *testing.T, g *gateway, cs *bridgeClients, rng *rand.Rand) {
	t.Helper()
	cs.grant(func(p *publisher) int {
		if p.qos == 1 {
			return bridgeQoS1Msgs
		}
		return bridgeQoS2Msgs
	})
	total := len(cs.all)
	target := total/5 + rng.IntN(total*3/5)
	pollUntil(t, fmt.Sprintf("the local subscriber to receive %d messages", target), func() bool {
		n, _ := cs.local.progress()
		return n >= target
	})
	st := g.waitBridge(t, "the gateway's state", func(mqttd.BridgeState) bool { return true })
	killed := time.Now()
	g.restart(t)
	t.Logf("uplink down: gateway killed with %d messages queued for the remote (kill at %d received locally), restarted in %s",
		st.Queued, target, time.Since(killed).Round(time.Millisecond))
	pollUntil(t, "the gateway's local subscriber to get every message", func() bool { return cs.local.hasAll(cs.all) })
	st = g.waitBridge(t, "the gateway's state", func(mqttd.BridgeState) bool { return true })
	t.Logf("uplink down: %d messages sent, %d queued for the remote, %s after the kill",
		total, st.Queued, time.Since(killed).Round(time.Millisecond))
}

// draining runs once the remote is back: the publishers send a tenth
// more, live, while the queue drains, and the gateway is killed when a
// random share of the queue has gone out (CRASH_CYCLES times, by default
// once). It returns the bridge's state once it has drained.
func draining(t *testing.T, g *gateway, cs *bridgeClients, rng *rand.Rand) mqttd.BridgeState {
	t.Helper()
	began := time.Now()
	st := g.waitBridge(t, "the gateway's state", func(mqttd.BridgeState) bool { return true })
	cs.grant(func(p *publisher) int {
		if p.qos == 1 {
			return bridgeQoS1Msgs / 10
		}
		return bridgeQoS2Msgs / 10
	})
	// CRASH_CYCLES kills, each when a random share of what is left has
	// gone out, small enough that the last kill still finds a queue.
	cycles := envInt(t, "CRASH_CYCLES", 1)
	for range cycles {
		target := st.Queued/(5*cycles) + seededIntN(rng, st.Queued*3/(5*cycles))
		st = g.waitBridge(t, fmt.Sprintf("%d messages forwarded to the remote", target),
			func(st mqttd.BridgeState) bool { return st.ForwardedOut >= uint64(target) })
		g.restart(t)
		t.Logf("draining: gateway killed %s after the remote came back, %d forwarded (target %d), %d queued and %d in flight",
			time.Since(began).Round(time.Millisecond), st.ForwardedOut, target, st.Queued, st.Inflight)
		if st.Queued+st.Inflight == 0 {
			t.Errorf("a kill came after the queue had drained: it tested nothing")
			break
		}
		st = g.waitBridge(t, "the gateway's state", func(mqttd.BridgeState) bool { return true })
	}
	restarted := time.Now()
	pollUntil(t, "the gateway's local subscriber to get every message", func() bool { return cs.local.hasAll(cs.all) })
	cs.finish(t)
	// The longest spell, as polled, with messages waiting and none
	// forwarded tells of a queue that stalls, which the checks cannot see
	// once it moves on.
	var stall time.Duration
	forwarded, moved := ^uint64(0), time.Now()
	st = g.waitBridge(t, "the bridge's queue to drain", func(st mqttd.BridgeState) bool {
		if st.ForwardedOut != forwarded || st.Queued+st.Inflight == 0 {
			forwarded, moved = st.ForwardedOut, time.Now()
		}
		stall = max(stall, time.Since(moved))
		return st.Connected && st.Queued == 0 && st.Inflight == 0
	})
	t.Logf("drained %s after the restart; the longest spell with messages waiting and none forwarded: %s",
		time.Since(restarted).Round(time.Millisecond), stall.Round(time.Millisecond))
	return st
}

// bridgeConfig writes the gateway's config: the harness's (writeConfig)
// with the JSON API on a free loopback port and the bridge to remoteAddr,
// reconnecting quickly, with room for every message.
func bridgeConfig(t *testing.T, remoteAddr string) string {
	t.Helper()
	path := writeConfig(t)
	base, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(base) + `metrics:
  address: 127.0.0.1:0
bridges:
  - name: cloud
    addresses: ["` + remoteAddr + `"]
    client_id: gw1
    reconnect_min: 50ms
    reconnect_max: 500ms
    max_queued_messages: 100000
    max_queued_bytes: 67108864
    topics:
      - {pattern: "q1/#", direction: out, qos: 1, remote_prefix: gw1/}
      - {pattern: "q2/#", direction: out, qos: 2, remote_prefix: gw1/}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// bridgeClients are the gateway's local clients: QoS 1 and QoS 2
// publishers, each on its own topic under q1/ or q2/, and a persistent
// subscriber to # that tells when every message granted has been sent.
type bridgeClients struct {
	pubs    []*publisher
	local   *subscriber
	granted map[*publisher]int
	all     []string // every payload granted
	wg      sync.WaitGroup
	stop    func() // ends every client and waits for it; idempotent
}

// startBridgeClients starts the local subscriber and the publishers,
// which send nothing until granted.
func startBridgeClients(t *testing.T, book *addrBook) *bridgeClients {
	t.Helper()
	abort := make(chan struct{})
	deadline := time.Now().Add(3 * bridgeWait)
	mk := func(id string) peer { return peer{id: id, book: book, abort: abort, deadline: deadline} }
	cs := &bridgeClients{local: newSubscriber(mk("gw-local"), "#"), granted: map[*publisher]int{}}
	for _, g := range []struct{ qos, pubs int }{{1, bridgeQoS1Pubs}, {2, bridgeQoS2Pubs}} {
		for range g.pubs {
			p := newPublisher(mk(fmt.Sprintf("s%d", len(cs.pubs))), byte(g.qos), bridgeWindow)
			p.topic = fmt.Sprintf("q%d/%s", g.qos, p.id)
			cs.pubs = append(cs.pubs, p)
		}
	}
	cs.stop = sync.OnceFunc(func() {
		close(abort)
		cs.wg.Wait()
	})
	t.Cleanup(cs.stop)
	c, err := cs.local.join()
	if err != nil {
		t.Fatal(err)
	}
	cs.wg.Go(func() { cs.local.run(c) })
	for _, p := range cs.pubs {
		cs.wg.Go(p.run)
	}
	return cs
}

// grant lets each publisher send n(p) more messages.
func (cs *bridgeClients) grant(n func(*publisher) int) {
	for _, p := range cs.pubs {
		k := n(p)
		for seq := cs.granted[p]; seq < cs.granted[p]+k; seq++ {
			cs.all = append(cs.all, payload(p.id, seq))
		}
		cs.granted[p] += k
		p.grant(k)
	}
}

// finish tells the publishers to complete what they have in flight and
// waits until they have.
func (cs *bridgeClients) finish(t *testing.T) {
	t.Helper()
	for _, p := range cs.pubs {
		close(p.finish)
	}
	timeout := time.NewTimer(bridgeWait)
	defer timeout.Stop()
	for _, p := range cs.pubs {
		select {
		case <-p.done:
		case <-timeout.C:
			t.Fatalf("publisher %s not done within %s", p.id, bridgeWait)
		}
	}
}

// acked returns every payload whose flow its publisher completed; the
// publishers must be done.
func (cs *bridgeClients) acked() []string {
	var want []string
	for _, p := range cs.pubs {
		for seq := range p.acked {
			want = append(want, payload(p.id, seq))
		}
	}
	return want
}

// pollEvery is how often the scenario looks at what it waits for.
const pollEvery = 5 * time.Millisecond

// pollUntil polls cond until it holds, failing the test after bridgeWait.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	deadline := time.Now().Add(bridgeWait)
	for range int(bridgeWait/pollEvery) + 1 {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		<-tick.C
	}
	t.Fatalf("%s: not within %s", what, bridgeWait)
}

// seededIntN is rng.IntN for n that may be 0.
func seededIntN(rng *rand.Rand, n int) int {
	if n <= 0 {
		return 0
	}
	return rng.IntN(n)
}
