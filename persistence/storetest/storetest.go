// Package storetest is the contract every persistence.Store must meet,
// written once as a test suite: each implementation's tests call Run with
// a way to open (and reopen) it.
//
// What the suite holds the contract to, beyond the comments of
// persistence/store.go:
//   - Load's sessions, a session's subscriptions and its awaiting-rel ids
//     come in any order; nil and empty slices and maps are alike. Outbound
//     entries come in Seq order.
//   - Putting a session that exists replaces its record only: its
//     subscriptions, outbound entries, awaiting-rel ids and will stay.
//   - Deleting what is not there (a session, subscription, outbound entry,
//     awaiting-rel id, will or retained topic) is no error; but every op
//     on a session that is not stored, OpDeleteSession aside, is
//     ErrNoSession.
//   - Ops apply in order: an outbound entry or retained topic must come
//     after the PutMessage of its message. A message is dropped once the
//     whole batch leaves nothing referring to it, so an op later in the
//     batch may still refer to a message whose last reference went before.
//   - A will holds its own copy of its message: its ID need not be stored,
//     and it is neither in Snapshot.Messages nor counted there.
//
// It is not a _test package so that each implementation's tests can
// import it; of mqttd it imports only persistence and packets.
package storetest

import (
	"errors"
	"testing"

	"mqttd/persistence"
)

// Opener gives the suite stores to test.
//
// Run closes every store it gets from Open or Reopen once, at the end of
// the subtest, except those it hands back to Reopen: Reopen closes old,
// then opens the same underlying storage again. A store with no storage
// to reopen (persistence.Memory) may make Close a no-op and have Reopen
// return old itself.
type Opener interface {
	// Open returns a new, empty store.
	Open(t *testing.T) persistence.Store
	// Reopen closes old and opens what it stored again.
	Reopen(t *testing.T, old persistence.Store) persistence.Store
}

// Run runs the contract suite against the stores o opens, each subtest on
// a store of its own.
func Run(t *testing.T, o Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h *harness)
	}{
		{"Empty", testEmpty},
		{"Sessions", testSessions},
		{"SessionReplaceKeepsContents", testSessionReplaceKeeps},
		{"SessionDelete", testSessionDelete},
		{"SessionDeleteAndPutInOneBatch", testSessionDeleteAndPut},
		{"Subscriptions", testSubscriptions},
		{"OutboundOrder", testOutboundOrder},
		{"OutboundReplace", testOutboundReplace},
		{"OutboundDelete", testOutboundDelete},
		{"OutboundNoMessage", testOutboundNoMessage},
		{"NoSession", testNoSession},
		{"BadOp", testBadOp},
		{"MessageRoundTrip", testMessageRoundTrip},
		{"MessageShared", testMessageShared},
		{"MessageUnreferencedNotKept", testMessageUnreferenced},
		{"MessageFirstPutKept", testMessageFirstKept},
		{"MessageMustBePutBeforeUse", testMessageOrder},
		{"MessageReleasedAndRetakenInBatch", testMessageRetaken},
		{"Retained", testRetained},
		{"AwaitingRel", testAwaitingRel},
		{"ForwardsAndStamps", testForwardsAndStamps},
		{"Wills", testWills},
		{"Atomic", testAtomic},
		{"InvalidOps", testInvalidOps},
		{"LongKeys", testLongKeys},
		{"Reopen", testReopen},
		{"CopiesOnApply", testCopiesOnApply},
		{"CopiesOnLoad", testCopiesOnLoad},
		{"Concurrent", testConcurrent},
		{"Volume", testVolume},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newHarness(t, o))
		})
	}
}

// harness holds the store a subtest works on, which Reopen replaces.
type harness struct {
	t *testing.T
	o Opener
	s persistence.Store
}

func newHarness(t *testing.T, o Opener) *harness {
	t.Helper()
	h := &harness{t: t, o: o, s: o.Open(t)}
	t.Cleanup(func() {
		if err := h.s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}

// do applies the batch build makes, which must succeed.
func (h *harness) do(build func(b *persistence.Batch)) {
	h.t.Helper()
	var b persistence.Batch
	build(&b)
	if err := h.s.Apply(&b); err != nil {
		h.t.Fatalf("Apply: %v", err)
	}
}

// fail applies the batch build makes, which must fail with an error that
// is want, and checks that it changed nothing, also once reopened.
func (h *harness) fail(want error, build func(b *persistence.Batch)) {
	h.t.Helper()
	before := h.load()
	var b persistence.Batch
	build(&b)
	if err := h.s.Apply(&b); !errors.Is(err, want) {
		h.t.Fatalf("Apply = %v, want %v", err, want)
	}
	h.check(before)
}

// run runs fn as a subtest on the same store.
func (h *harness) run(name string, fn func()) {
	h.t.Helper()
	parent := h.t
	parent.Run(name, func(t *testing.T) {
		h.t = t
		defer func() { h.t = parent }()
		fn()
	})
}

func (h *harness) reopen() {
	h.t.Helper()
	h.s = h.o.Reopen(h.t, h.s)
}

// load reads the store back and checks what holds for every Snapshot.
func (h *harness) load() *persistence.Snapshot {
	h.t.Helper()
	snap, err := h.s.Load()
	if err != nil {
		h.t.Fatalf("Load: %v", err)
	}
	if err := checkSnapshot(snap); err != nil {
		h.t.Fatalf("Load: %v", err)
	}
	return snap
}

// check compares Load with want, then reopens the store and does it again.
func (h *harness) check(want *persistence.Snapshot) {
	h.t.Helper()
	if d := diff(h.load(), want); d != "" {
		h.t.Fatalf("Load differs from what was applied:\n%s", d)
	}
	h.reopen()
	if d := diff(h.load(), want); d != "" {
		h.t.Fatalf("Load after Reopen differs from what was applied:\n%s", d)
	}
}
