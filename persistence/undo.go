package persistence

// Undo records how to revert changes made to a store's memory while it
// applies a batch, so that a batch that fails leaves no trace: every
// change pushes the function that reverts it, which is simpler than
// validating a batch in a first pass, as whether an operation is valid
// depends on those before it in the batch.
type Undo struct {
	fns []func()
}

// Push records f, run by Rollback.
func (u *Undo) Push(f func()) { u.fns = append(u.fns, f) }

// Rollback reverts every change recorded, the last first.
func (u *Undo) Rollback() {
	for i := len(u.fns) - 1; i >= 0; i-- {
		u.fns[i]()
	}
}

// SetUndo sets (put) or deletes (!put) m[k] and records in u how to
// restore it.
func SetUndo[K comparable, V any](u *Undo, m map[K]V, k K, v V, put bool) {
	old, had := m[k]
	if put {
		m[k] = v
	} else {
		delete(m, k)
	}
	u.Push(func() {
		if had {
			m[k] = old
		} else {
			delete(m, k)
		}
	})
}
