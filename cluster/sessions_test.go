package cluster

import (
	"context"
	"slices"
	"time"

	"mqttd/internal/testutil"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"mqttd/internal/natstest"
	"mqttd/persistence"
	"mqttd/persistence/storetest"
)

// sessionOpener opens SessionStores on one nats-server, each subtest on
// a cluster (a stream) of its own, with a Memory as the local store.
type sessionOpener struct {
	nc    *nats.Conn
	n     atomic.Int64
	local map[persistence.Store]*persistence.Memory
	name  map[persistence.Store]string
}

func (o *sessionOpener) open(t *testing.T, cluster string, local *persistence.Memory) persistence.Store {
	t.Helper()
	s, err := OpenSessionStore(o.nc, SessionStoreConfig{Cluster: cluster, Node: "n1"}, local)
	if err != nil {
		t.Fatal(err)
	}
	o.local[s], o.name[s] = local, cluster
	return s
}

func (o *sessionOpener) Open(t *testing.T) persistence.Store {
	return o.open(t, "s"+strconv.FormatInt(o.n.Add(1), 10), persistence.NewMemory())
}

func (o *sessionOpener) Reopen(t *testing.T, old persistence.Store) persistence.Store {
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	return o.open(t, o.name[old], o.local[old])
}

func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestSessionStoreContract holds the replicated sessions to the contract
// every store meets, on one JetStream server.
func TestSessionStoreContract(t *testing.T) {
	urls := natstest.Cluster(t, 1)
	storetest.Run(t, &sessionOpener{nc: connect(t, urls[0]),
		local: make(map[persistence.Store]*persistence.Memory), name: make(map[persistence.Store]string)})
}

func openSessions(t *testing.T, nc *nats.Conn, node string, local persistence.Store) *SessionStore {
	t.Helper()
	s, err := OpenSessionStore(nc, SessionStoreConfig{Cluster: "c1", Node: node}, local)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func apply(t *testing.T, s persistence.Store, build func(b *persistence.Batch)) {
	t.Helper()
	var b persistence.Batch
	build(&b)
	if err := s.Apply(&b); err != nil {
		t.Fatal(err)
	}
}

// TestSessionAdoptedFromAnotherNode: a session one node wrote, on a
// stream of three replicas, is read whole by another node through
// another server (its client reconnected there), and is that node's
// from then on.
func TestSessionAdoptedFromAnotherNode(t *testing.T) {
	urls := natstest.Cluster(t, 3)
	a := openSessions(t, connect(t, urls[0]), "a", persistence.NewMemory())
	will := &persistence.Will{At: 42, Message: persistence.Message{ID: 9, Topic: "will/a1", Payload: []byte("gone"), QoS: 1}}
	apply(t, a, func(b *persistence.Batch) {
		b.PutSession(persistence.Session{ID: "a1", Username: "u", Version: 5, Expiry: 3600})
		b.PutSubscription("a1", persistence.Subscription{Filter: "t/#", ID: 3})
		b.PutMessage(&persistence.Message{ID: 1, Topic: "t/1", Payload: []byte("one"), QoS: 1})
		b.PutMessage(&persistence.Message{ID: 2, Topic: "t/2", Payload: []byte("two"), QoS: 2})
		b.PutOutbound("a1", persistence.Outbound{Seq: 1, MessageID: 1, QoS: 1})
		b.PutOutbound("a1", persistence.Outbound{Seq: 2, MessageID: 2, QoS: 2, PacketID: 5, SubIDs: []uint32{3}})
		b.PutAwaitingRel("a1", 7)
		b.PutWill("a1", will)
	})

	bLocal := persistence.NewMemory()
	b := openSessions(t, connect(t, urls[2]), "b", bLocal)
	if snap, err := b.Load(); err != nil || len(snap.Sessions) != 0 {
		t.Fatalf("node b loads %d sessions (%v); a1 is a's", len(snap.Sessions), err)
	}
	st, msgs, err := b.Adopt("a1")
	if err != nil || st == nil {
		t.Fatalf("Adopt: %v, %v", st, err)
	}
	if len(st.Outbound) != 2 || st.Outbound[0].Seq != 1 || st.Outbound[1].PacketID != 5 || st.Outbound[1].SubIDs[0] != 3 {
		t.Fatalf("adopted entries %+v", st.Outbound)
	}
	if string(msgs[1].Payload) != "one" || string(msgs[2].Payload) != "two" || msgs[2].QoS != 2 {
		t.Fatalf("adopted messages %+v %+v", msgs[1], msgs[2])
	}
	if len(st.Subscriptions) != 1 || st.Subscriptions[0].ID != 3 || len(st.AwaitingRel) != 1 || st.AwaitingRel[0] != 7 ||
		st.Will == nil || string(st.Will.Message.Payload) != "gone" || st.Session.Expiry != 3600 {
		t.Fatalf("adopted session %+v", st)
	}
	if st, _, err := b.Adopt("nobody"); err != nil || st != nil {
		t.Fatalf("Adopt of an id with no session: %v, %v", st, err)
	}

	// The broker stores it again as its own: the record now names b,
	// and what b deletes of what a wrote is gone.
	apply(t, b, func(bt *persistence.Batch) {
		bt.PutSession(st.Session)
		bt.DeleteOutbound("a1", 1)
	})
	b2 := openSessions(t, connect(t, urls[1]), "b", bLocal)
	snap, err := b2.Load()
	if err != nil || len(snap.Sessions) != 1 || len(snap.Sessions[0].Outbound) != 1 || snap.Sessions[0].Outbound[0].Seq != 2 {
		t.Fatalf("b reopened: %+v, %v", snap, err)
	}
	a2 := openSessions(t, connect(t, urls[1]), "a", persistence.NewMemory())
	if snap, err := a2.Load(); err != nil || len(snap.Sessions) != 0 {
		t.Fatalf("a reopened still has %d sessions (%v)", len(snap.Sessions), err)
	}
}

// TestSessionBatchBeyondAtomicLimit: a batch of more messages than one
// atomic write takes is written whole, in several, and the tombstones of
// its entries leave the stream.
func TestSessionBatchBeyondAtomicLimit(t *testing.T) {
	urls := natstest.Cluster(t, 1)
	nc := connect(t, urls[0])
	s := openSessions(t, nc, "a", persistence.NewMemory())
	const n = maxAtomic + 500
	apply(t, s, func(b *persistence.Batch) {
		b.PutSession(persistence.Session{ID: "big"})
		b.PutMessage(&persistence.Message{ID: 1, Topic: "t", Payload: []byte("x"), QoS: 1})
		for seq := uint64(1); seq <= n; seq++ {
			b.PutOutbound("big", persistence.Outbound{Seq: seq, MessageID: 1, QoS: 1})
		}
	})
	snap, err := openSessions(t, nc, "a", persistence.NewMemory()).Load()
	if err != nil || len(snap.Sessions) != 1 || len(snap.Sessions[0].Outbound) != n {
		t.Fatalf("read back %d sessions (%v)", len(snap.Sessions), err)
	}
	apply(t, s, func(b *persistence.Batch) {
		for seq := uint64(1); seq <= n; seq++ {
			b.DeleteOutbound("big", seq)
		}
	})
	stream, err := s.js.Stream(context.Background(), s.stream)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitWithin(t, 30*time.Second, "the tombstones to expire", func() bool {
		info, err := stream.Info(context.Background())
		return err == nil && info.State.Msgs == 1 // the session's record
	})
}

// TestSessionEntryOverMaxPayload: an entry larger than a NATS message
// may be is refused as malformed (the committer then fails its unit
// alone), and nothing of its batch is kept.
func TestSessionEntryOverMaxPayload(t *testing.T) {
	urls := natstest.Cluster(t, 1)
	nc := connect(t, urls[0])
	s := openSessions(t, nc, "a", persistence.NewMemory())
	var b persistence.Batch
	b.PutSession(persistence.Session{ID: "big"})
	b.PutMessage(&persistence.Message{ID: 1, Topic: "t", Payload: make([]byte, nc.MaxPayload()), QoS: 1})
	b.PutOutbound("big", persistence.Outbound{Seq: 1, MessageID: 1, QoS: 1})
	if err := s.Apply(&b); !persistence.Malformed(err) {
		t.Fatalf("Apply of an entry over max_payload: %v, want a malformed batch", err)
	}
	if snap, err := s.Load(); err != nil || len(snap.Sessions) != 0 {
		t.Fatalf("after the refused batch: %d sessions (%v)", len(snap.Sessions), err)
	}
}

// TestSessionAdoptedIDsRenamed: a session adopted from another node
// refers to message ids of that node's, which this node may have given
// messages of its own: read back, each message keeps its own payload,
// under an id of its own. A session forgotten (handed over) is not
// written by the node that let it go.
func TestSessionAdoptedIDsRenamed(t *testing.T) {
	urls := natstest.Cluster(t, 1)
	nc := connect(t, urls[0])
	a := openSessions(t, nc, "a", persistence.NewMemory())
	bLocal := persistence.NewMemory()
	b := openSessions(t, nc, "b", bLocal)
	put := func(s *SessionStore, id, payload string) {
		apply(t, s, func(bt *persistence.Batch) {
			bt.PutSession(persistence.Session{ID: id})
			bt.PutMessage(&persistence.Message{ID: 1, Topic: "t", Payload: []byte(payload), QoS: 1})
			bt.PutOutbound(id, persistence.Outbound{Seq: 1, MessageID: 1, QoS: 1})
		})
	}
	put(a, "x", "from a")
	put(b, "y", "from b")
	st, _, err := b.Adopt("x")
	if err != nil || st == nil {
		t.Fatal(st, err)
	}
	apply(t, b, func(bt *persistence.Batch) { bt.PutSession(st.Session) })
	a.Forget("x")
	apply(t, a, func(bt *persistence.Batch) { bt.PutSession(persistence.Session{ID: "other"}) })

	snap, err := openSessions(t, nc, "b", bLocal).Load()
	if err != nil || len(snap.Sessions) != 2 {
		t.Fatalf("b read back %d sessions (%v)", len(snap.Sessions), err)
	}
	for _, ss := range snap.Sessions {
		m := snap.Messages[ss.Outbound[0].MessageID]
		if want := map[string]string{"x": "from a", "y": "from b"}[ss.Session.ID]; m == nil || string(m.Payload) != want {
			t.Errorf("session %s's entry reads %+v, want %q", ss.Session.ID, m, want)
		}
	}
	if snap.Sessions[0].Outbound[0].MessageID == snap.Sessions[1].Outbound[0].MessageID {
		t.Errorf("two messages under one id")
	}
}

// TestSessionRenumber: after Renumber every entry refers to a new id,
// one per message, a message shared by two sessions still shared, and
// the retained messages keep theirs; the index writes on with them.
func TestSessionRenumber(t *testing.T) {
	urls := natstest.Cluster(t, 1)
	nc := connect(t, urls[0])
	local := persistence.NewMemory()
	s := openSessions(t, nc, "a", local)
	apply(t, s, func(b *persistence.Batch) {
		b.PutSession(persistence.Session{ID: "x"})
		b.PutSession(persistence.Session{ID: "y"})
		b.PutMessage(&persistence.Message{ID: 1, Topic: "t", Payload: []byte("shared"), QoS: 1})
		b.PutMessage(&persistence.Message{ID: 2, Topic: "r", Payload: []byte("retained"), QoS: 1})
		b.PutOutbound("x", persistence.Outbound{Seq: 1, MessageID: 1, QoS: 1})
		b.PutOutbound("y", persistence.Outbound{Seq: 1, MessageID: 1, QoS: 1})
		b.PutOutbound("y", persistence.Outbound{Seq: 2, MessageID: 2, QoS: 1})
		b.PutRetained("r", 2)
	})
	s2 := openSessions(t, nc, "a", local)
	next := uint64(100)
	if err := s2.Renumber(func() uint64 { next++; return next }); err != nil {
		t.Fatal(err)
	}
	snap, err := s2.Sessions(func(string) bool { return false })
	if err != nil || len(snap.Sessions) != 2 {
		t.Fatalf("%+v, %v", snap, err)
	}
	ids := map[uint64]string{}
	for _, ss := range snap.Sessions {
		for _, o := range ss.Outbound {
			if o.MessageID <= 100 {
				t.Errorf("%s's entry %d kept id %d", ss.Session.ID, o.Seq, o.MessageID)
			}
			ids[o.MessageID] = string(snap.Messages[o.MessageID].Payload)
		}
	}
	if len(ids) != 2 || next != 102 {
		t.Errorf("ids after renumbering: %v (next %d), want two", ids, next)
	}
	// The retained message is still the local store's under its id, and
	// the index writes on: dropping y lets its messages go, x keeps its.
	apply(t, s2, func(b *persistence.Batch) { b.DeleteSession("y"); b.DeleteRetained("r") })
	got, err := openSessions(t, nc, "a", local).Load()
	if err != nil || len(got.Sessions) != 1 || len(got.Messages) != 1 || len(got.Retained) != 0 {
		t.Fatalf("after deleting y and the retained message: %+v, %v", got, err)
	}
}

// TestSessionRenumberOverOldIDs: the new ids a restarted node gives the
// stream's messages may be ids the stream used for others, not renamed
// yet (the node's counter starts from its own file's, which holds no
// session's messages): every entry keeps its own message.
func TestSessionRenumberOverOldIDs(t *testing.T) {
	urls := natstest.Cluster(t, 1)
	nc := connect(t, urls[0])
	local := persistence.NewMemory()
	s := openSessions(t, nc, "a", local)
	payloads := map[uint64]string{1: "retained", 2: "two", 3: "three", 4: "four"}
	apply(t, s, func(b *persistence.Batch) {
		b.PutSession(persistence.Session{ID: "x"})
		b.PutSession(persistence.Session{ID: "y"})
		for id, p := range payloads {
			b.PutMessage(&persistence.Message{ID: id, Topic: "t", Payload: []byte(p), QoS: 1})
		}
		b.PutRetained("r", 1)
		b.PutOutbound("x", persistence.Outbound{Seq: 1, MessageID: 2, QoS: 1})
		b.PutOutbound("x", persistence.Outbound{Seq: 2, MessageID: 3, QoS: 1})
		b.PutOutbound("y", persistence.Outbound{Seq: 1, MessageID: 3, QoS: 1})
		b.PutOutbound("y", persistence.Outbound{Seq: 2, MessageID: 4, QoS: 1})
	})
	want := map[string][]string{"x": {"two", "three"}, "y": {"three", "four"}}
	s2 := openSessions(t, nc, "a", local)
	next := uint64(1) // the local file's last id: the retained message's
	if err := s2.Renumber(func() uint64 { next++; return next }); err != nil {
		t.Fatal(err)
	}
	snap, err := s2.Sessions(func(string) bool { return false })
	if err != nil {
		t.Fatalf("sessions after renumbering: %v", err)
	}
	for _, ss := range snap.Sessions {
		var got []string
		for _, o := range ss.Outbound {
			got = append(got, string(snap.Messages[o.MessageID].Payload))
		}
		if !slices.Equal(got, want[ss.Session.ID]) {
			t.Errorf("%s's entries after renumbering: %q, want %q", ss.Session.ID, got, want[ss.Session.ID])
		}
	}
	// Writing on refers to the new ids; the retained message is intact.
	apply(t, s2, func(b *persistence.Batch) { b.DeleteSession("y") })
	got, err := openSessions(t, nc, "a", local).Load()
	if err != nil || len(got.Sessions) != 1 || got.Retained["r"] != 1 || string(got.Messages[1].Payload) != "retained" {
		t.Fatalf("after deleting y: %+v, %v", got, err)
	}
}
