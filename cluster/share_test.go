package cluster

import (
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"mqttd/internal/natstest"
	"mqttd/internal/testutil"
)

// queueSubscribers counts the subscribers of queue group queue to subj
// that srv knows of: its own clients', and one per other server with
// some (a route carries a server's queue subscriptions as one).
func queueSubscribers(t *testing.T, srv *server.Server, subj, queue string) int {
	t.Helper()
	n := 0
	sz, err := srv.Subsz(&server.SubszOptions{Subscriptions: true, Limit: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	for _, sd := range sz.Subs {
		if sd.Subject == subj && sd.Queue == queue {
			n++
		}
	}
	rz, err := srv.Routez(&server.RoutezOptions{SubscriptionsDetail: true})
	if err != nil {
		t.Fatal(err)
	}
	remotes := map[string]bool{}
	for _, r := range rz.Routes {
		for _, sd := range r.SubsDetail {
			if sd.Subject == subj && sd.Queue == queue {
				remotes[r.RemoteID] = true
			}
		}
	}
	return n + len(remotes)
}

// waitSubscribers waits until srv knows of n subscribers of every subject
// of share group group on filter.
func waitSubscribers(t *testing.T, srv *server.Server, group, filter string, n int) {
	t.Helper()
	queue := shareQueue("c1", group, filter)
	for _, subj := range shareSubjects("c1", filter) {
		testutil.WaitFor(t, fmt.Sprintf("%d subscribers of %s on %s", n, subj, srv.Name()), func() bool {
			return queueSubscribers(t, srv, subj, queue) == n
		})
	}
}

// collectShared reads recorders until total messages of share group
// group have come, and returns how many times each payload came and each
// recorder's count of them, checking they came for filter; what else comes is returned apart.
func collectShared(t *testing.T, group, filter string, total int, rs ...*recorder) (seen map[string]int, per []int, other []*Message) {
	t.Helper()
	seen, per = map[string]int{}, make([]int, len(rs))
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(10 * time.Second))}}
	for _, r := range rs {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(r.ch)})
	}
	for got := 0; got < total; {
		i, v, _ := reflect.Select(cases)
		if i == 0 {
			t.Fatalf("%d of %d messages of group %s came within 10 s: %v", got, total, group, per)
		}
		m := v.Interface().(*Message)
		if m.Group != group {
			other = append(other, m)
			continue
		}
		if m.Filter != filter {
			t.Errorf("a message of group %s came for filter %q, want %q", group, m.Filter, filter)
		}
		got++
		per[i-1]++
		seen[string(m.Payload)]++
	}
	return seen, per, other
}

// TestSharedOnePerGroup: three nodes want share group g on s/#; each
// message the third publishes, live or retained, reaches exactly one of
// them, tagged with the group and filter, and the publishing node is
// chosen too (its shared connection echoes). The retained messages also
// reach the other nodes' stores as before, untagged.
func TestSharedOnePerGroup(t *testing.T) {
	s := natstest.Start(t, 3)
	urls := s.URLs()
	ra, rb, rp := newRecorder(), newRecorder(), newRecorder()
	a := startNode(t, "A", ra, testLogger(t), urls[0])
	b := startNode(t, "B", rb, testLogger(t), urls[1])
	p := startNode(t, "P", rp, testLogger(t), urls[2])
	logOnFailure(t, s, a, b, p)
	for _, n := range []*Node{a, b, p} {
		n.WantShared("g", "s/#")
	}
	waitSubscribers(t, s.Server(2), "g", "s/#", 3)

	const live, retained = 90, 3
	for i := range live + retained {
		m := &Message{Topic: "s/" + strconv.Itoa(i%7), QoS: 1, Payload: []byte(strconv.Itoa(i)), Retain: i >= live}
		if err := p.Publish(m); err != nil {
			t.Fatal(err)
		}
	}
	seen, per, other := collectShared(t, "g", "s/#", live+retained, ra, rb, rp)
	for i := range live + retained {
		if n := seen[strconv.Itoa(i)]; n != 1 {
			t.Errorf("message %d came %d times through the group, want once", i, n)
		}
	}
	for i, n := range per {
		if n == 0 {
			t.Errorf("node %d got none of the group's %d messages: %v", i, live+retained, per)
		}
	}
	for _, n := range []*Node{a, b, p} {
		if err := n.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var sharedIn uint64
	for _, n := range []*Node{a, b, p} {
		st := n.Stats()
		sharedIn += st.SharedIn
		if st.SharedFilters != 1 || st.SharedSubscriptions != 4 || st.SharedUnwanted != 0 || st.DroppedIn != 0 {
			t.Errorf("%s: %+v", n.Name(), st)
		}
	}
	if sharedIn != live+retained {
		t.Errorf("the nodes counted %d shared messages after their Close, want %d", sharedIn, live+retained)
	}
	// Nothing came untagged, retained or not: no node wants s/# but its
	// group (each node finds the retained messages in the replicated
	// stream).
	for _, r := range []*recorder{ra, rb, rp} {
		for len(r.ch) > 0 {
			other = append(other, <-r.ch)
		}
	}
	for _, m := range other {
		t.Errorf("untagged message %+v", m)
	}
}

// TestUnwantSharedStopsDelivery: a node opens its shared connection only
// at its first WantShared; the pair stays wanted until its last
// UnwantShared, after which every message goes to the other node's
// member.
func TestUnwantSharedStopsDelivery(t *testing.T) {
	s := natstest.Start(t, 2)
	urls := s.URLs()
	ra, rp := newRecorder(), newRecorder()
	a := startNode(t, "A", ra, testLogger(t), urls[0])
	p := startNode(t, "P", rp, testLogger(t), urls[1])
	logOnFailure(t, s, a, p)
	if n := s.Server(0).NumClients(); n != 1 {
		t.Fatalf("A has %d connections before any WantShared, want 1", n)
	}
	a.WantShared("g", "u")
	a.WantShared("g", "u")
	p.WantShared("g", "u")
	testutil.WaitFor(t, "A's shared connection", func() bool { return s.Server(0).NumClients() == 2 })
	waitSubscribers(t, s.Server(1), "g", "u", 2)
	a.UnwantShared("g", "u")
	a.UnwantShared("g", "never")
	if st := a.Stats(); st.SharedFilters != 1 || st.SharedSubscriptions != 2 {
		t.Fatalf("after one UnwantShared of two: %+v", st)
	}
	a.UnwantShared("g", "u")
	if st := a.Stats(); st.SharedFilters != 0 || st.SharedSubscriptions != 0 {
		t.Fatalf("after the last UnwantShared: %+v", st)
	}
	waitSubscribers(t, s.Server(1), "g", "u", 1)
	const total = 30
	for i := range total {
		if err := p.Publish(&Message{Topic: "u", Payload: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	// P's member gets them all: none went to A.
	seen, _, other := collectShared(t, "g", "u", total, rp)
	if len(seen) != total || len(other) != 0 {
		t.Fatalf("P got %d distinct messages of %d, and %d others", len(seen), total, len(other))
	}
	if len(ra.ch) != 0 || a.Stats().SharedIn != 0 {
		t.Fatalf("A got messages after its last UnwantShared: %+v", a.Stats())
	}
}

// TestSharedClose: Close right after a first WantShared closes the
// shared connection too; WantShared after Close opens none.
func TestSharedClose(t *testing.T) {
	s := natstest.Start(t, 1)
	urls := s.URLs()
	a := startNode(t, "A", newRecorder(), testLogger(t), urls[0])
	a.WantShared("g", "c/#")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := startNode(t, "B", newRecorder(), testLogger(t), urls[0])
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b.WantShared("g", "c/#")
	testutil.WaitFor(t, "no connection left", func() bool { return s.Server(0).NumClients() == 0 })
	if st := b.Stats(); st.SharedFilters != 0 || st.SharedSubscriptions != 0 || b.shared.opening != nil {
		t.Fatalf("WantShared after Close: %+v", st)
	}
}
