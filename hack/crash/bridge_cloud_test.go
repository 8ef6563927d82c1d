package crash

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"mqttd"
	"mqttd/internal/testutil"
	"mqttd/packets"
)

// cloud is the bridge's remote broker: an mqttd in the test's process,
// on a data directory of its own and always the same address, so that the
// gateway's config names it across its restarts. It is not what the
// tests kill, so it need not be a child process, and in-process it runs
// under the race detector too.
type cloud struct {
	addr, dir string
	stop      func() // shuts the running broker down; idempotent
}

// newCloud picks the remote's address and data directory.
func newCloud(t *testing.T) *cloud {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cloud{addr: l.Addr().String(), dir: t.TempDir(), stop: func() {}}
	l.Close()
	return c
}

// start runs the remote broker on its address and data directory.
func (c *cloud) start(t *testing.T) {
	t.Helper()
	srv, err := mqttd.New(mqttd.Options{DataDir: c.dir})
	if err != nil {
		t.Fatal(err)
	}
	c.stop = testutil.ServeAt(t, srv, c.addr)
}

// arrival is one message the remote's subscriber received.
type arrival struct {
	seq       int
	delivered bool // handed to the application, not a QoS 2 duplicate
}

// cloudSub is the persistent 5.0 subscriber on the remote, with a QoS 1
// subscription to what the bridge's q1 rule forwards and a QoS 2 one to
// what its q2 rule forwards. It is a compliant receiver as subscriber is
// (QoS 2 ids held until PUBREL), and it keeps the order of arrival per
// topic. It is the test goroutine's own.
type cloudSub struct {
	id, addr string

	awaiting  map[uint16]string    // QoS 2 ids awaiting PUBREL, to their payloads
	got       map[string]int       // deliveries by payload
	gotQoS    map[string]byte      // the QoS each payload came at
	topics    map[string]string    // the topic each payload came on
	order     map[string][]arrival // by topic, in order of arrival
	history   map[string][]string  // by QoS 2 payload, what happened on the wire
	received  int                  // PUBLISH packets, DUP ones included
	protoErrs []string
}

// join makes the subscriber's session on the remote and leaves it.
func (s *cloudSub) join(t *testing.T) {
	t.Helper()
	c, _, err := dial(s.addr, packets.V5, connectPacket(packets.V5, s.id, false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.close(true)
	if err := c.subscribe(1, "gw1/q1/#", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.subscribe(2, "gw1/q2/#", 2); err != nil {
		t.Fatal(err)
	}
}

// read connects to the session and receives until every payload in want
// was delivered and nothing more came for a moment (to catch late
// duplicates), or until nothing has come for long enough that more is not
// coming.
func (s *cloudSub) read(t *testing.T, want []string) {
	t.Helper()
	const (
		settle = 300 * time.Millisecond
		giveUp = 5 * time.Second
	)
	s.awaiting, s.got, s.gotQoS = map[uint16]string{}, map[string]int{}, map[string]byte{}
	s.topics, s.order, s.history = map[string]string{}, map[string][]arrival{}, map[string][]string{}
	c, present, err := dial(s.addr, packets.V5, connectPacket(packets.V5, s.id, false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.close(true)
	if !present {
		t.Errorf("the remote lost %s's session", s.id)
	}
	last := time.Now()
	// Each packet is answered, and a quiet spell ends the loop: the count
	// bounds a remote that keeps sending.
	for range 20 * (len(want) + 100) {
		quiet := time.NewTimer(settle)
		select {
		case pk, ok := <-c.in:
			quiet.Stop()
			if !ok {
				t.Errorf("the remote ended %s's connection: %v", s.id, c.err)
				return
			}
			last = time.Now()
			if err := s.handle(c, pk); err != nil {
				t.Errorf("%s answering the remote: %v", s.id, err)
				return
			}
			continue
		case <-quiet.C:
		}
		if time.Since(last) >= giveUp || s.hasAll(want) {
			return
		}
	}
	t.Errorf("%s: the remote sent more than %d packets", s.id, 20*(len(want)+100))
}

// handle answers one packet from the remote.
func (s *cloudSub) handle(c *conn, pk packets.Packet) error {
	switch p := pk.(type) {
	case *packets.Publish:
		s.received++
		key := string(p.Payload)
		switch p.QoS {
		case 1:
			s.deliver(p)
			return c.send(&packets.Puback{PacketID: p.PacketID})
		case 2:
			if held, ok := s.awaiting[p.PacketID]; ok {
				s.note(held, "id %d%s not delivered: awaiting PUBREL", p.PacketID, dupMark(p.Dup))
				if held != key {
					s.note(key, "id %d%s not delivered: the id still awaits PUBREL for %s", p.PacketID, dupMark(p.Dup), held)
					s.protoErr("packet id %d reused for %s while %s awaits PUBREL", p.PacketID, key, held)
				}
				s.arrived(p, false)
			} else {
				s.awaiting[p.PacketID] = key
				s.deliver(p)
				s.note(key, "id %d%s delivered", p.PacketID, dupMark(p.Dup))
			}
			return c.send(&packets.Pubrec{PacketID: p.PacketID})
		default:
			s.protoErr("%s came at QoS 0", key)
		}
	case *packets.Pubrel:
		if key, ok := s.awaiting[p.PacketID]; ok {
			s.note(key, "id %d PUBREL, PUBCOMP sent", p.PacketID)
		}
		delete(s.awaiting, p.PacketID)
		return c.send(&packets.Pubcomp{PacketID: p.PacketID})
	default:
		s.protoErr("unexpected %s", pk.Type())
	}
	return nil
}

// deliver hands a message to the "application".
func (s *cloudSub) deliver(p *packets.Publish) {
	key := string(p.Payload)
	s.got[key]++
	if q, seen := s.gotQoS[key]; seen && q != p.QoS {
		s.protoErr("%s came at QoS %d and at QoS %d", key, q, p.QoS)
	}
	s.gotQoS[key] = p.QoS
	if t, seen := s.topics[key]; seen && t != p.Topic {
		s.protoErr("%s came on %s and on %s", key, t, p.Topic)
	}
	s.topics[key] = p.Topic
	s.arrived(p, true)
}

// arrived records a message in its topic's order of arrival.
func (s *cloudSub) arrived(p *packets.Publish, delivered bool) {
	seq := -1
	if _, n, ok := parsePayload(string(p.Payload)); ok {
		seq = n
	}
	s.order[p.Topic] = append(s.order[p.Topic], arrival{seq: seq, delivered: delivered})
}

func (s *cloudSub) note(key, format string, args ...any) {
	s.history[key] = append(s.history[key], fmt.Sprintf(format, args...))
}

func (s *cloudSub) protoErr(format string, args ...any) {
	if len(s.protoErrs) < 20 {
		s.protoErrs = append(s.protoErrs, s.id+": "+fmt.Sprintf(format, args...))
	}
}

func (s *cloudSub) hasAll(want []string) bool {
	for _, k := range want {
		if s.got[k] == 0 {
			return false
		}
	}
	return true
}

// checkCloud asserts what the remote's subscriber got from the gateway's
// publishers (which are done): every acknowledged message, QoS 1 at
// least once and QoS 2 exactly once, on its topic with the gateway's
// prefix, in order per topic, and nothing that was never published.
func checkCloud(t *testing.T, pubs []*publisher, s *cloudSub) {
	t.Helper()
	for _, e := range s.protoErrs {
		t.Errorf("remote protocol violation: %s", e)
	}
	byID := map[string]*publisher{}
	for _, p := range pubs {
		byID[p.id] = p
	}
	for key := range s.got {
		id, seq, ok := parsePayload(key)
		p := byID[id]
		switch {
		case !ok || p == nil || seq >= p.sent:
			t.Errorf("%s: invented message %q on %s (never sent)", s.id, key, s.topics[key])
		case s.topics[key] != "gw1/"+p.topic:
			t.Errorf("%s: %q came on %s, want gw1/%s", s.id, key, s.topics[key], p.topic)
		case s.gotQoS[key] != p.qos:
			t.Errorf("%s: %q came at QoS %d, published at %d", s.id, key, s.gotQoS[key], p.qos)
		}
	}
	for _, p := range pubs {
		checkCloudPub(t, p, s)
		checkOrder(t, "gw1/"+p.topic, s.order["gw1/"+p.topic])
	}
}

// checkCloudPub asserts and logs what the remote's subscriber got of p.
func checkCloudPub(t *testing.T, p *publisher, s *cloudSub) {
	t.Helper()
	var delivered, dups int
	var lost, twice []string
	for seq := range p.sent {
		key := payload(p.id, seq)
		n := s.got[key]
		if n > 0 {
			delivered++
		}
		if n > 1 {
			dups += n - 1
			if p.qos == 2 {
				twice = append(twice, fmt.Sprintf("%s×%d", key, n))
			}
		}
		if n == 0 && p.acked[seq] {
			lost = append(lost, key)
		}
	}
	t.Logf("%s <- %s QoS %d: sent %d, acknowledged %d, delivered %d, duplicates %d, acknowledged but lost %d",
		s.id, p.id, p.qos, p.sent, len(p.acked), delivered, dups, len(lost))
	if len(lost) > 0 {
		t.Errorf("%s lost %d acknowledged QoS %d messages of %s, e.g. %s", s.id, len(lost), p.qos, p.id, sample(lost))
		if p.qos == 2 {
			_, seq, _ := parsePayload(lost[0])
			t.Logf("what %s saw of %s: %s", p.id, lost[0], p.story(seq))
		}
	}
	if len(twice) > 0 {
		t.Errorf("%s got %d QoS 2 messages of %s more than once: %s", s.id, len(twice), p.id, sample(twice))
		first := strings.SplitN(twice[0], "×", 2)[0]
		_, seq, _ := parsePayload(first)
		t.Logf("what %s saw of %s: %s; what %s saw: %s", s.id, first, strings.Join(s.history[first], "; "), p.id, p.story(seq))
	}
}

// checkOrder asserts that the messages delivered on topic came in order:
// each first delivery after the first delivery of every earlier message.
// A redelivery (QoS 1 sent again after a crash) may come later; it is not
// a first delivery.
func checkOrder(t *testing.T, topic string, arrivals []arrival) {
	t.Helper()
	seen := map[int]bool{}
	last, bad := -1, 0
	var first string
	for i, a := range arrivals {
		if !a.delivered || seen[a.seq] {
			continue
		}
		seen[a.seq] = true
		if a.seq < last {
			bad++
			if first == "" {
				first = fmt.Sprintf("message %d arrived first at position %d, after message %d", a.seq, i, last)
			}
		}
		last = max(last, a.seq)
	}
	if bad > 0 {
		t.Errorf("%s: %d messages out of order; the first: %s", topic, bad, first)
	}
}
