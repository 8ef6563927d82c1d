package topictrie

import (
	"testing"
	"unsafe"
)

// A node fills an 80-byte allocation: a trie with a filter per client
// holds one or more per client, idle or not.
func TestNodeStaysSmall(t *testing.T) {
	if size := unsafe.Sizeof(node[*int, uint64]{}); unsafe.Sizeof(uintptr(0)) == 8 && size > 80 {
		t.Errorf("node is %d bytes, past the 80-byte size class", size)
	}
}

// A set past indexAt items gets an index in the trie's indexes, which
// follows its items as they move and goes once the set is small again.
func TestLargeSetIndex(t *testing.T) {
	tr := New[int, int](Options{})
	const n = 3 * indexAt
	for _, f := range []string{"a/b", "$share/g/a/b"} {
		for k := range n {
			if isNew, err := tr.Subscribe(f, k, k); err != nil || !isNew {
				t.Fatalf("Subscribe(%q, %d) = %v, %v", f, k, isNew, err)
			}
		}
		if isNew, _ := tr.Subscribe(f, 7, 70); isNew {
			t.Fatalf("Subscribe(%q, 7) again reported a new subscription", f)
		}
	}
	if len(tr.index) != 2 {
		t.Fatalf("%d indexes for two sets of %d items, want 2", len(tr.index), n)
	}
	for k := 0; k < n; k += 2 { // every other one, so items move
		if !tr.Unsubscribe("a/b", k) || !tr.Unsubscribe("$share/g/a/b", k) {
			t.Fatalf("Unsubscribe of %d failed", k)
		}
	}
	for k := range n {
		i := tr.root.lookup("a/b").subs.find(k, tr.index)
		if found := i >= 0; found != (k%2 == 1) {
			t.Fatalf("key %d found %v after removing the even keys", k, found)
		}
		if k == 7 {
			if got := tr.root.lookup("a/b").subs.items[i].value; got != 70 {
				t.Fatalf("key 7's value %d, want 70", got)
			}
		}
	}
	for k := 1; k < n; k += 2 {
		tr.Unsubscribe("a/b", k)
		tr.Unsubscribe("$share/g/a/b", k)
	}
	if len(tr.index) != 0 || tr.Len() != 0 || tr.root.children.len() != 0 {
		t.Errorf("after removing everything: %d indexes, %d subscriptions, %d children of the root", len(tr.index), tr.Len(), tr.root.children.len())
	}
}
