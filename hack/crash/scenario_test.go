package crash

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// scenario is one crash campaign: publishers and subscribers run while the
// broker is stopped by crash and restarted, cycles times.
type scenario struct {
	cycles   int
	perCycle int // new messages each publisher may send per cycle
	// maxDelay bounds the random chaos delay between a (re)start and the
	// next crash.
	maxDelay time.Duration
	dataDir  string
	// crash stops the running broker the way the test is about (SIGKILL,
	// SIGTERM, SIGKILL plus a power cut) and leaves dataDir ready for the
	// next start. Nil means no crash and no restart at all, not even the
	// final one: the harness's control run.
	crash func(t *testing.T, b *broker)
}

// testDeadline, plus two seconds per cycle, bounds a whole scenario;
// every client gives up past it.
const testDeadline = 2 * time.Minute

// envInt reads a positive integer from the environment, def when unset.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// seeded returns the random source of a test and logs its seed, so that a
// failing run can be repeated with CRASH_SEED.
func seeded(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("CRASH_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CRASH_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("seed %d (CRASH_SEED=%d repeats this run)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// writeConfig writes the broker's config file: queue limits far above what
// a long campaign queues for the offline subscriber, so that nothing is
// dropped for room and every loss the test finds is a durability loss.
// CRASH_MQTTD_CONFIG adds top-level YAML lines (such as "durability:
// interval", to see what the power cut does to a weaker mode).
func writeConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mqttd.yaml")
	cfg := "limits:\n  max_queued: 4000000\n  max_queued_bytes: 1073741824\n" + os.Getenv("CRASH_MQTTD_CONFIG") + "\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runScenario runs sc and asserts the guarantees of issue 15.
func runScenario(t *testing.T, sc scenario) {
	t.Helper()
	rng := seeded(t)
	cfg := writeConfig(t)
	b := startBroker(t, sc.dataDir, "--config", cfg)
	book := newAddrBook(b.addr)
	cs := startClients(t, book, time.Now().Add(testDeadline+time.Duration(sc.cycles)*2*time.Second))

	for cycle := range sc.cycles {
		for _, p := range cs.pubs {
			p.grant(sc.perCycle)
		}
		// A deliberate chaos delay, not a wait for anything: the crash
		// lands at a random point of the publishers' traffic.
		chaos := time.NewTimer(time.Duration(rng.Int64N(int64(sc.maxDelay) + 1)))
		<-chaos.C
		if sc.crash == nil {
			continue
		}
		sc.crash(t, b)
		b = startBroker(t, sc.dataDir, "--config", cfg)
		book.set(b.addr)
		if t.Failed() {
			t.Fatalf("stopping after cycle %d", cycle)
		}
	}

	// Let the publishers complete what they have in flight, on a broker
	// that stays up, then stop it cleanly and start it once more.
	for _, p := range cs.pubs {
		close(p.finish)
	}
	for _, p := range cs.pubs {
		<-p.done
	}
	if sc.crash != nil {
		b.stop(t, syscall.SIGTERM)
		b = startBroker(t, sc.dataDir, "--config", cfg)
		book.set(b.addr)
	}
	cs.wg.Go(func() { cs.offline.run(nil) })

	var want []string
	for _, p := range cs.pubs {
		for seq := range p.acked {
			want = append(want, payload(p.id, seq))
		}
	}
	subs := []*subscriber{cs.online, cs.offline}
	drain(t, subs, want)
	cs.stop()
	check(t, cs.pubs, subs)
}

// clientSet is a scenario's MQTT clients: two QoS 1 and two QoS 2
// publishers on topics under crash/, and two persistent subscribers to
// crash/# at QoS 2, one online throughout, one offline until the end.
type clientSet struct {
	online, offline *subscriber
	pubs            []*publisher
	wg              sync.WaitGroup
	stop            func() // ends every client and waits for it; idempotent
}

// startClients subscribes both subscribers (the offline one then
// disconnects) and starts the online one and the publishers, which send
// nothing until granted. The test's cleanup stops them all.
func startClients(t *testing.T, book *addrBook, deadline time.Time) *clientSet {
	t.Helper()
	abort := make(chan struct{})
	mk := func(id string) peer { return peer{id: id, book: book, abort: abort, deadline: deadline} }
	cs := &clientSet{online: newSubscriber(mk("sub-online"), "crash/#"), offline: newSubscriber(mk("sub-offline"), "crash/#")}
	for _, q := range []byte{1, 1, 2, 2} {
		cs.pubs = append(cs.pubs, newPublisher(mk(fmt.Sprintf("q%d-%d", q, len(cs.pubs))), q, 16))
	}
	cs.stop = sync.OnceFunc(func() {
		close(abort)
		cs.wg.Wait()
	})
	t.Cleanup(cs.stop)

	oc, err := cs.online.join()
	if err != nil {
		t.Fatal(err)
	}
	cs.wg.Go(func() { cs.online.run(oc) })
	fc, err := cs.offline.join()
	if err != nil {
		t.Fatal(err)
	}
	fc.close(true) // offline from now on; it comes back only to drain
	for _, p := range cs.pubs {
		cs.wg.Go(p.run)
	}
	return cs
}

// drain waits until every subscriber has every payload in want and then
// has been quiet for a moment (to catch late duplicates), or until no
// message has arrived for long enough that more are not coming, or the
// deadline. It polls: the subscribers are running goroutines.
func drain(t *testing.T, subs []*subscriber, want []string) {
	t.Helper()
	const (
		settle   = 300 * time.Millisecond
		giveUp   = 5 * time.Second
		deadline = 2 * time.Minute
		poll     = 20 * time.Millisecond
	)
	start := time.Now()
	for time.Since(start) < deadline {
		last := start
		all := true
		for _, s := range subs {
			_, at := s.progress()
			if at.After(last) {
				last = at
			}
			all = all && s.hasAll(want)
		}
		quiet := time.Since(last)
		if (all && quiet >= settle) || quiet >= giveUp {
			return
		}
		tick := time.NewTimer(poll)
		<-tick.C
	}
	t.Logf("subscribers still receiving %s after the last restart", deadline)
}

// check asserts the guarantees over what the clients saw, and reports
// the counts.
func check(t *testing.T, pubs []*publisher, subs []*subscriber) {
	t.Helper()
	sent := map[string]int{} // publisher id -> messages sent
	for _, p := range pubs {
		sent[p.id] = p.sent
		if p.err != nil {
			t.Errorf("publisher %s: %v", p.id, p.err)
		}
		for _, e := range p.protoErrs {
			t.Errorf("broker protocol violation: %s", e)
		}
		if p.sessionsLost > 0 {
			t.Errorf("publisher %s: the broker forgot its session on %d of %d reconnects", p.id, p.sessionsLost, p.connects-1)
		}
	}
	for _, s := range subs {
		if s.err != nil {
			t.Errorf("subscriber %s: %v", s.id, s.err)
		}
		for _, e := range s.protoErrs {
			t.Errorf("broker protocol violation: %s", e)
		}
		if s.sessionsLost > 0 {
			t.Errorf("subscriber %s: the broker forgot its session on %d of %d reconnects", s.id, s.sessionsLost, s.connects-1)
		}
		got := s.deliveries()
		for key := range got {
			if id, seq, ok := parsePayload(key); !ok || seq >= sent[id] {
				t.Errorf("subscriber %s: invented message %q (never sent)", s.id, key)
			}
		}
		for _, p := range pubs {
			checkPair(t, p, s, got)
		}
	}
}

// checkPair asserts what subscriber s got from publisher p and logs the
// counts: QoS 1 at least once, QoS 2 exactly once, for every message
// whose flow the publisher completed; QoS 2 never more than once.
func checkPair(t *testing.T, p *publisher, s *subscriber, got map[string]int) {
	t.Helper()
	var delivered, dups int
	var lost, twice []string
	for seq := range p.sent {
		n := got[payload(p.id, seq)]
		if n > 0 {
			delivered++
		}
		if n > 1 {
			dups += n - 1
			if p.qos == 2 {
				twice = append(twice, fmt.Sprintf("%s×%d", payload(p.id, seq), n))
			}
		}
		if n == 0 && p.acked[seq] {
			lost = append(lost, payload(p.id, seq))
		}
	}
	t.Logf("%-11s <- %s QoS %d: sent %d, acknowledged %d, delivered %d, duplicates %d, acknowledged but lost %d",
		s.id, p.id, p.qos, p.sent, len(p.acked), delivered, dups, len(lost))
	if len(lost) > 0 {
		t.Errorf("%s lost %d acknowledged QoS %d messages of %s, e.g. %s", s.id, len(lost), p.qos, p.id, sample(lost))
		if p.qos == 2 {
			_, seq, _ := parsePayload(lost[0])
			t.Logf("what %s saw of %s: %s; what %s saw: %s", s.id, lost[0], s.story(lost[0]), p.id, p.story(seq))
		}
	}
	if len(twice) > 0 {
		t.Errorf("%s got %d QoS 2 messages of %s more than once: %s", s.id, len(twice), p.id, sample(twice))
		first := strings.SplitN(twice[0], "×", 2)[0]
		_, seq, _ := parsePayload(first)
		t.Logf("what %s saw of %s: %s; what %s saw: %s", s.id, first, s.story(first), p.id, p.story(seq))
	}
}

// sample shows the first few entries of a long list, in order.
func sample(keys []string) string {
	slices.SortFunc(keys, func(a, b string) int {
		_, x, _ := parsePayload(strings.SplitN(a, "×", 2)[0])
		_, y, _ := parsePayload(strings.SplitN(b, "×", 2)[0])
		return x - y
	})
	if len(keys) > 8 {
		return strings.Join(keys[:8], " ") + " …"
	}
	return strings.Join(keys, " ")
}
