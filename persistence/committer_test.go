package persistence_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"mqttd/persistence"
)

// gate is a Store that holds each Apply until the test lets it go, to see
// what a slow fsync does to the batches that arrive meanwhile.
type gate struct {
	persistence.Store
	entered chan int // the number of operations of each Apply begun
	release chan struct{}
}

func (g *gate) Apply(b *persistence.Batch) error {
	g.entered <- b.Len()
	<-g.release
	return g.Store.Apply(b)
}

func session(id string) *persistence.Batch {
	var b persistence.Batch
	b.PutSession(persistence.Session{ID: id})
	return &b
}

// TestCommitterGroups checks group commit: while a commit is held, the
// batches handed in wait and then go, all of them, into one transaction;
// each is told it is done only after its own transaction.
func TestCommitterGroups(t *testing.T) {
	g := &gate{Store: persistence.NewMemory(), entered: make(chan int, 10), release: make(chan struct{})}
	c := persistence.NewCommitter(g)
	results := make(chan string, 10)
	submit := func(id string) {
		c.Submit(session(id), func(err error) {
			if err != nil {
				results <- id + ": " + err.Error()
				return
			}
			results <- id
		})
	}
	submit("first")
	if n := <-g.entered; n != 1 {
		t.Fatalf("first commit of %d operations, want 1", n)
	}
	for i := range 5 {
		submit(fmt.Sprint("later", i))
	}
	select {
	case r := <-results:
		t.Fatalf("%s done while its commit was held", r)
	default:
	}
	g.release <- struct{}{}
	if r := <-results; r != "first" {
		t.Fatalf("got %s, want first", r)
	}
	if n := <-g.entered; n != 5 {
		t.Fatalf("second commit of %d operations, want the 5 that waited", n)
	}
	g.release <- struct{}{}
	for range 5 {
		if r := <-results; len(r) != len("later0") {
			t.Errorf("result %q", r)
		}
	}
	if st := c.Stats(); st.Commits != 2 || st.Batches != 6 || st.Ops != 6 {
		t.Errorf("stats %+v, want 2 commits of 6 batches", st)
	}
	snap, err := g.Load()
	if err != nil || len(snap.Sessions) != 6 {
		t.Errorf("%d sessions stored (%v), want 6", len(snap.Sessions), err)
	}
}

// TestCommitterIsolatesBadBatch checks that a batch that does not hold
// together, merged with others, fails alone.
func TestCommitterIsolatesBadBatch(t *testing.T) {
	g := &gate{Store: persistence.NewMemory(), entered: make(chan int, 10), release: make(chan struct{}, 10)}
	c := persistence.NewCommitter(g)
	errs := make(chan error, 3)
	c.Submit(session("hold"), func(err error) { errs <- err })
	<-g.entered
	var bad persistence.Batch
	bad.PutSubscription("ghost", persistence.Subscription{Filter: "x"})
	got := map[string]chan error{"ok1": make(chan error, 1), "bad": make(chan error, 1), "ok2": make(chan error, 1)}
	c.Submit(session("ok1"), func(err error) { got["ok1"] <- err })
	c.Submit(&bad, func(err error) { got["bad"] <- err })
	c.Submit(session("ok2"), func(err error) { got["ok2"] <- err })
	for range 5 { // the held one, the merged round, then the three alone
		g.release <- struct{}{}
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if err := <-got["bad"]; !errors.Is(err, persistence.ErrNoSession) {
		t.Errorf("bad batch: %v, want ErrNoSession", err)
	}
	for _, id := range []string{"ok1", "ok2"} {
		if err := <-got[id]; err != nil {
			t.Errorf("%s failed with the bad batch: %v", id, err)
		}
	}
	if snap, _ := g.Load(); len(snap.Sessions) != 3 {
		t.Errorf("%d sessions, want hold, ok1, ok2", len(snap.Sessions))
	}
}

// TestCommitterConcurrent hands in batches from many goroutines, each in
// order, and checks everything is applied and each goroutine's batches in
// the order it submitted them (a later subscription replaces an earlier
// one of the same filter).
func TestCommitterConcurrent(t *testing.T) {
	store := persistence.NewMemory()
	c := persistence.NewCommitter(store)
	const writers, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers*(each+1))
	for w := range writers {
		wg.Go(func() {
			id := fmt.Sprint("w", w)
			var done sync.WaitGroup
			done.Add(each + 1)
			c.Submit(session(id), func(err error) { errs <- err; done.Done() })
			for i := range each {
				var b persistence.Batch
				b.PutSubscription(id, persistence.Subscription{Filter: "f", ID: uint32(i + 1)})
				c.Submit(&b, func(err error) { errs <- err; done.Done() })
			}
			done.Wait()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	snap, err := store.Load()
	if err != nil || len(snap.Sessions) != writers {
		t.Fatalf("%d sessions (%v)", len(snap.Sessions), err)
	}
	for _, s := range snap.Sessions {
		if len(s.Subscriptions) != 1 || s.Subscriptions[0].ID != each {
			t.Errorf("%s: %+v, want the last subscription submitted", s.Session.ID, s.Subscriptions)
		}
	}
	if st := c.Stats(); st.Commits >= st.Batches {
		t.Logf("no grouping happened: %+v", st)
	}
}

// failures is an Owner recording the tickets it is told failed.
type failures struct {
	mu      sync.Mutex
	tickets []uint64
}

func (f *failures) StoreFailed(ticket uint64, _ error) {
	f.mu.Lock()
	f.tickets = append(f.tickets, ticket)
	f.mu.Unlock()
}

// TestCommitterAddWait checks the log the broker uses: Add commits
// nothing by itself; Wait for a ticket commits everything added up to it
// and returns only after the owner of a unit that failed was told; a Wait
// for a ticket already applied returns at once; Flush commits without
// waiting.
func TestCommitterAddWait(t *testing.T) {
	g := &gate{Store: persistence.NewMemory(), entered: make(chan int, 10), release: make(chan struct{}, 10)}
	c := persistence.NewCommitter(g)
	var mine, other failures
	c.Add(session("a"), &mine)
	var bad persistence.Batch
	bad.PutSubscription("ghost", persistence.Subscription{Filter: "x"})
	badTicket := c.Add(&bad, &mine)
	last := c.Add(session("b"), &other)
	select {
	case n := <-g.entered:
		t.Fatalf("a commit of %d operations began before anyone waited", n)
	default:
	}
	for range 4 { // the merged round, then the three units alone
		g.release <- struct{}{}
	}
	done := make(chan struct{})
	c.Wait(last, func() { close(done) })
	<-done
	if n := <-g.entered; n != 3 {
		t.Errorf("first commit of %d operations, want the 3 added", n)
	}
	for range 3 {
		<-g.entered
	}
	if len(mine.tickets) != 1 || mine.tickets[0] != badTicket || len(other.tickets) != 0 {
		t.Fatalf("failures told: mine %v, other %v; want mine [%d]", mine.tickets, other.tickets, badTicket)
	}
	// What waits for an answer asks whether a unit after the last one
	// applied when it began failed: the bad one did, none after it.
	if !c.FailedAfter(badTicket-1) || c.FailedAfter(badTicket) {
		t.Errorf("FailedAfter(%d), FailedAfter(%d) = %v, %v; want true, false",
			badTicket-1, badTicket, c.FailedAfter(badTicket-1), c.FailedAfter(badTicket))
	}
	if a := c.Applied(); a != last {
		t.Errorf("Applied() = %d, want %d", a, last)
	}
	now := false
	c.Wait(last, func() { now = true })
	if !now {
		t.Error("Wait for an applied ticket did not return at once")
	}
	c.Add(session("c"), nil)
	g.release <- struct{}{}
	c.Flush()
	if n := <-g.entered; n != 1 {
		t.Errorf("Flush committed %d operations, want 1", n)
	}
	c.Sync()
	if snap, _ := g.Load(); len(snap.Sessions) != 3 {
		t.Errorf("%d sessions stored, want a, b and c", len(snap.Sessions))
	}
	if st := c.Stats(); st.Failed != 1 {
		t.Errorf("stats %+v, want 1 failed unit", st)
	}
}

// TestCommitterCancelsPutAndDelete: an outbound entry put and deleted
// while both wait for a commit is not written at all; a delete of an
// entry stored before is kept, though a later put of it waited with it.
func TestCommitterCancelsPutAndDelete(t *testing.T) {
	g := &gate{Store: persistence.NewMemory(), entered: make(chan int, 10), release: make(chan struct{}, 10)}
	c := persistence.NewCommitter(g)
	var b persistence.Batch
	b.PutSession(persistence.Session{ID: "s"})
	msg := &persistence.Message{ID: 1, Topic: "t"}
	b.PutMessage(msg)
	b.PutOutbound("s", persistence.Outbound{Seq: 1, MessageID: 1, QoS: 2})
	c.Add(&b, nil)
	g.release <- struct{}{}
	c.Sync()
	if n := <-g.entered; n != 3 {
		t.Fatalf("first commit of %d operations, want 3", n)
	}

	add := func(f func(b *persistence.Batch)) {
		var b persistence.Batch
		f(&b)
		c.Add(&b, nil)
	}
	// Entry 2 comes and goes while waiting, and its message with it; entry
	// 1, stored, is released and then completed.
	add(func(b *persistence.Batch) {
		b.PutMessage(&persistence.Message{ID: 2, Topic: "u"})
		b.PutOutbound("s", persistence.Outbound{Seq: 2, MessageID: 2, QoS: 1})
	})
	add(func(b *persistence.Batch) {
		b.PutOutbound("s", persistence.Outbound{Seq: 1, MessageID: 1, QoS: 2, Released: true, PacketID: 2})
	})
	add(func(b *persistence.Batch) { b.DeleteOutbound("s", 2) })
	add(func(b *persistence.Batch) { b.DeleteOutbound("s", 1) })
	g.release <- struct{}{}
	c.Sync()
	if n := <-g.entered; n != 1 {
		t.Errorf("second commit of %d operations, want 1: the delete of entry 1 (message 2, which nothing left refers to, is not put)", n)
	}
	snap, err := g.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Sessions) != 1 || len(snap.Sessions[0].Outbound) != 0 || len(snap.Messages) != 0 {
		t.Errorf("left %+v, want the session alone", snap)
	}
}

// TestCommitterGroup: the units of an open group, and those added after
// its start by anyone, wait for End and then go in one transaction; a
// unit added before the group is not held back by it.
func TestCommitterGroup(t *testing.T) {
	g := &gate{Store: persistence.NewMemory(), entered: make(chan int, 10), release: make(chan struct{}, 10)}
	c := persistence.NewCommitter(g)
	before := c.Add(session("before"), nil)
	group := c.Begin()
	c.Add(session("in-group"), nil)
	after := c.Add(session("after"), nil)
	done := make(chan string, 2)
	c.Wait(before, func() { done <- "before" })
	c.Wait(after, func() { done <- "after" })
	g.release <- struct{}{}
	if n := <-g.entered; n != 1 {
		t.Fatalf("first commit of %d operations, want only the one before the group", n)
	}
	if got := <-done; got != "before" {
		t.Fatalf("%s done first", got)
	}
	select {
	case got := <-done:
		t.Fatalf("%s done while the group is open", got)
	default:
	}
	applied := make(chan struct{})
	c.AddThen(session("last"), nil, func() { close(applied) })
	c.End(group)
	g.release <- struct{}{}
	if n := <-g.entered; n != 3 {
		t.Errorf("second commit of %d operations, want the group, what came after it and the last", n)
	}
	if got := <-done; got != "after" {
		t.Errorf("%s done, want after", got)
	}
	// The committer calls the waiters of a commit one after another: the
	// test, woken by the first, waits for the last.
	select {
	case <-applied:
	case <-time.After(10 * time.Second):
		t.Error("AddThen's callback not called once applied")
	}
}

// TestCommitterHold: Hold returns only once what was added before it is
// applied, and what is added while it holds waits for its release.
func TestCommitterHold(t *testing.T) {
	g := &gate{Store: persistence.NewMemory(), entered: make(chan int, 10), release: make(chan struct{}, 10)}
	c := persistence.NewCommitter(g)
	c.Add(session("before"), nil)
	held := make(chan func())
	go func() { held <- c.Hold() }()
	if n := <-g.entered; n != 1 {
		t.Fatalf("first commit of %d operations, want the one before Hold", n)
	}
	select {
	case <-held:
		t.Fatal("Hold returned before what came before it was applied")
	default:
	}
	g.release <- struct{}{}
	release := <-held
	during := c.Add(session("during"), nil)
	done := make(chan struct{})
	c.Wait(during, func() { close(done) })
	select {
	case n := <-g.entered:
		t.Fatalf("a commit of %d operations while held", n)
	default:
	}
	release()
	if n := <-g.entered; n != 1 {
		t.Errorf("commit of %d operations after the release, want 1", n)
	}
	g.release <- struct{}{}
	<-done
}

// TestCommitterOverlappingGroups: a group opened while another is open,
// which then closes first, must not let a commit split the other's units
// (its last ones come after the second group's start).
func TestCommitterOverlappingGroups(t *testing.T) {
	g := &gate{Store: persistence.NewMemory(), entered: make(chan int, 10), release: make(chan struct{}, 10)}
	c := persistence.NewCommitter(g)
	first := c.Begin()
	c.Add(session("first-a"), nil)
	second := c.Begin()
	c.Add(session("second"), nil)
	last := c.Add(session("first-b"), nil)
	c.End(first)
	done := make(chan struct{})
	c.Wait(last, func() { close(done) })
	select {
	case n := <-g.entered:
		t.Fatalf("a commit of %d operations while the second group is open", n)
	default:
	}
	c.End(second)
	g.release <- struct{}{}
	<-done
	if n := <-g.entered; n != 3 {
		t.Errorf("commit of %d operations, want both groups' 3 together", n)
	}
}

// voids records the tickets a Voider was told of.
type voids struct {
	failures
	mu sync.Mutex
	t  []uint64
}

func (v *voids) Voided(ticket uint64) {
	v.mu.Lock()
	v.t = append(v.t, ticket)
	v.mu.Unlock()
}

func (v *voids) told() []uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]uint64(nil), v.t...)
}

// TestCommitterTellsVoidedUnits: a unit whose every operation is cancelled
// while it waits (its messages do not count: alone they are not kept) is
// told to its owner at once; one with an operation left, or one a commit
// already took, is not.
func TestCommitterTellsVoidedUnits(t *testing.T) {
	g := &gate{Store: persistence.NewMemory(), entered: make(chan int, 10), release: make(chan struct{}, 10)}
	c := persistence.NewCommitter(g)
	add := func(owner persistence.Owner, f func(b *persistence.Batch)) uint64 {
		var b persistence.Batch
		f(&b)
		return c.Add(&b, owner)
	}
	for _, id := range []string{"s", "s2"} {
		add(nil, func(b *persistence.Batch) { b.PutSession(persistence.Session{ID: id}) })
	}
	put := func(session string, seq uint64) func(b *persistence.Batch) {
		return func(b *persistence.Batch) {
			b.PutMessage(&persistence.Message{ID: seq, Topic: "t"})
			b.PutOutbound(session, persistence.Outbound{Seq: seq, MessageID: seq, QoS: 1})
		}
	}
	del := func(session string, seq uint64) func(b *persistence.Batch) {
		return func(b *persistence.Batch) { b.DeleteOutbound(session, seq) }
	}
	v := &voids{}
	taken := add(v, put("s", 1))
	c.Flush()
	<-g.entered // the commit holding entry 1 runs
	add(nil, del("s", 1))

	one := add(v, put("s", 2))
	both := add(v, func(b *persistence.Batch) { put("s", 3)(b); put("s2", 3)(b) })
	add(nil, del("s", 2))
	if got := v.told(); len(got) != 1 || got[0] != one {
		t.Fatalf("told %v, want [%d]: only the unit whose one entry was acknowledged", got, one)
	}
	add(nil, del("s", 3))
	if got := v.told(); len(got) != 1 {
		t.Fatalf("told %v: unit %d still has an entry for s2", got, both)
	}
	add(nil, del("s2", 3))
	if got := v.told(); len(got) != 2 || got[1] != both {
		t.Fatalf("told %v, want [%d %d]", got, one, both)
	}
	for range 2 {
		g.release <- struct{}{}
	}
	c.Sync()
	if got := v.told(); len(got) != 2 || slices.Contains(got, taken) {
		t.Errorf("told %v: unit %d, which a commit took, is applied, not voided", got, taken)
	}
}

// TestCommitterWaitsForQoS1Only: SetDelay's wait is for QoS 1 entries,
// which their subscriber's PUBACK deletes. A commit holding only a QoS 2
// entry goes at once; one holding a QoS 1 entry waits until the entry's
// delete cancels it, or the delay has passed. Virtual time: the delay is
// an hour, and nothing may wait for it.
func TestCommitterWaitsForQoS1Only(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := delayedCommitter(t)
		deliver := func(seq uint64, qos byte) *persistence.Batch {
			var b persistence.Batch
			b.PutMessage(&persistence.Message{ID: seq, Topic: "t", QoS: qos})
			b.PutOutbound("s", persistence.Outbound{Seq: seq, MessageID: seq, QoS: qos})
			return &b
		}
		done := make(chan uint64, 2)

		start := time.Now()
		c.Submit(deliver(1, 2), func(error) { done <- 1 })
		synctest.Wait()
		if len(done) != 1 || time.Since(start) != 0 {
			t.Fatalf("a QoS 2 entry waited %v for acknowledgements", time.Since(start))
		}
		<-done

		c.Submit(deliver(2, 1), func(error) { done <- 2 })
		synctest.Wait()
		if len(done) != 0 {
			t.Fatal("a QoS 1 entry was committed without waiting for its PUBACK")
		}
		var del persistence.Batch
		del.DeleteOutbound("s", 2)
		c.Add(&del, nil)
		synctest.Wait()
		if len(done) != 1 || time.Since(start) != 0 {
			t.Fatalf("the commit still waited after the entry was acknowledged (%v)", time.Since(start))
		}
		if st := c.Stats(); st.Cancelled == 0 {
			t.Errorf("the acknowledged entry was not cancelled: %+v", st)
		}
	})
}

// TestCommitterDoesNotWaitForAckDistant: a QoS 1 entry marked AckDistant
// (for a bridge's remote broker, a network round trip away, or an offline
// session) is committed at once, as a QoS 2 entry is. Virtual time, an
// hour's delay.
func TestCommitterDoesNotWaitForAckDistant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := delayedCommitter(t)
		var b persistence.Batch
		b.PutMessage(&persistence.Message{ID: 1, Topic: "t", QoS: 1})
		b.PutOutbound("$bridge/cloud", persistence.Outbound{Seq: 1, MessageID: 1, QoS: 1})
		b.Ops[1].AckDistant = true
		done := make(chan struct{}, 1)
		start := time.Now()
		c.Submit(&b, func(error) { done <- struct{}{} })
		synctest.Wait()
		if len(done) != 1 || time.Since(start) != 0 {
			t.Fatalf("an entry for a remote waited %v for its acknowledgement", time.Since(start))
		}
	})
}

// TestCommitterReplacedQoS1PutKeepsWaiting: a QoS 1 entry put again while
// SetDelay's wait runs (the same Seq, still unreleased) is still a QoS 1
// entry waiting for its PUBACK, so the wait goes on. A first version
// counted the replaced put out before the new one in, told the wait that
// no QoS 1 put was left, and stored the entry at once. The broker puts a
// QoS 1 entry once; the Committer's contract holds for any caller.
func TestCommitterReplacedQoS1PutKeepsWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := delayedCommitter(t)
		put := func(pid uint16) *persistence.Batch {
			var b persistence.Batch
			b.PutMessage(&persistence.Message{ID: 1, Topic: "t", QoS: 1})
			b.PutOutbound("s", persistence.Outbound{Seq: 1, MessageID: 1, QoS: 1, PacketID: pid})
			return &b
		}
		done := make(chan struct{}, 2)
		start := time.Now()
		c.Submit(put(0), func(error) { done <- struct{}{} })
		synctest.Wait()
		if len(done) != 0 {
			t.Fatal("a QoS 1 entry was committed without waiting for its PUBACK")
		}
		c.Add(put(7), nil) // the same entry, put again: still QoS 1, unreleased
		synctest.Wait()
		if len(done) != 0 {
			t.Fatalf("replacing a waiting QoS 1 put ended the wait after %v: the entry is stored before its PUBACK could cancel it", time.Since(start))
		}
		var del persistence.Batch
		del.DeleteOutbound("s", 1)
		c.Add(&del, nil)
		synctest.Wait()
		if len(done) != 1 {
			t.Fatal("the commit still waits after the entry was acknowledged")
		}
	})
}

// TestCommitterSkipsRoundOfVoidedUnits: when every entry of a round was
// acknowledged before its commit, the messages they carried are referred
// to by nothing left, and the round reaches no store at all: no
// transaction, no fsync. A message another live unit of the round refers
// to is kept.
func TestCommitterSkipsRoundOfVoidedUnits(t *testing.T) {
	g := &gate{Store: persistence.NewMemory(), entered: make(chan int, 10), release: make(chan struct{}, 10)}
	c := persistence.NewCommitter(g)
	g.release <- struct{}{}
	c.Add(session("s"), nil)
	c.Sync()
	<-g.entered

	deliver := func(seq, msg uint64) {
		var b persistence.Batch
		b.PutMessage(&persistence.Message{ID: msg, Topic: "t"})
		b.PutOutbound("s", persistence.Outbound{Seq: seq, MessageID: msg, QoS: 1})
		c.Add(&b, nil)
	}
	ack := func(seq uint64) {
		var b persistence.Batch
		b.DeleteOutbound("s", seq)
		c.Add(&b, nil)
	}
	deliver(1, 1)
	deliver(2, 2)
	ack(1)
	ack(2)
	g.release <- struct{}{} // so that a commit made all the same does not hang
	c.Sync()
	if len(g.entered) != 0 {
		t.Fatalf("a round of acknowledged entries reached the store with %d operations", <-g.entered)
	}
	<-g.release

	deliver(3, 3)
	deliver(4, 3) // the same message to a second entry, which stays
	ack(3)
	g.release <- struct{}{}
	c.Sync()
	if n := <-g.entered; n != 3 {
		t.Fatalf("commit of %d operations, want 3: message 3 as both units put it (entry 4 refers to it) and entry 4; entry 3 came and went", n)
	}
	snap, err := g.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Sessions[0].Outbound) != 1 || snap.Messages[3] == nil {
		t.Fatalf("left %+v", snap)
	}
}

// delayedCommitter is a Committer on a Memory holding session "s", with
// an hour's SetDelay: run in virtual time, nothing may wait for it.
func delayedCommitter(t *testing.T) *persistence.Committer {
	t.Helper()
	mem := persistence.NewMemory()
	if err := mem.Apply(session("s")); err != nil {
		t.Fatal(err)
	}
	c := persistence.NewCommitter(mem)
	c.SetDelay(time.Hour)
	return c
}

// nopVoider is an Owner that is told of its voided units and does
// nothing with it.
type nopVoider struct{}

func (nopVoider) StoreFailed(uint64, error) {}
func (nopVoider) Voided(uint64)             {}

// BenchmarkCommitterCancel measures what durable1 makes of each message
// while its subscriber acknowledges within the commit's wait: a window
// of 100 messages, each put with its outbound entry as the publisher's
// unit, then the 100 entries' deletes, each cancelling its put and
// voiding its unit, then the round's commit, left with nothing to write.
// Per message.
func BenchmarkCommitterCancel(b *testing.B) {
	c := persistence.NewCommitter(persistence.NewMemory())
	c.SetDelay(time.Second) // never reached: the deletes come first
	var owner nopVoider
	payload := make([]byte, 64)
	var put, del persistence.Batch
	b.ReportAllocs()
	id := uint64(0)
	for done := 0; done < b.N; done += 100 {
		for range 100 {
			id++
			put.Reset()
			put.PutMessage(&persistence.Message{ID: id, Topic: "bench/durable", Payload: payload, QoS: 1})
			put.PutOutbound("bench-sub", persistence.Outbound{Seq: id, MessageID: id, QoS: 1})
			c.Add(&put, owner)
		}
		for seq := id - 99; seq <= id; seq++ {
			del.Reset()
			del.DeleteOutbound("bench-sub", seq)
			c.Add(&del, nil)
		}
		c.Sync()
	}
}
