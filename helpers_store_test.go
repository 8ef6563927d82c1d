package mqttd_test

import (
	"sync"

	"mqttd/persistence"
)

// gatedStore is an in-memory store whose commits can be held, to see
// what waits for them, or made to fail.
type gatedStore struct {
	persistence.Store
	mu      sync.Mutex
	gate    chan struct{} // closed while commits pass
	fail    error
	entered chan struct{} // a commit is waiting at the gate
	applies int
}

// hold makes the commits from now on wait for release.
func (g *gatedStore) hold() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedStore) release() {
	g.mu.Lock()
	close(g.gate)
	g.mu.Unlock()
}

// failWith makes the commits from now on fail with err (nil: succeed).
func (g *gatedStore) failWith(err error) {
	g.mu.Lock()
	g.fail = err
	g.mu.Unlock()
}

func (g *gatedStore) Apply(b *persistence.Batch) error {
	g.mu.Lock()
	gate, fail := g.gate, g.fail
	g.applies++
	g.mu.Unlock()
	select {
	case <-gate:
	default:
		select {
		case g.entered <- struct{}{}:
		default:
		}
		<-gate
	}
	if fail != nil {
		return fail
	}
	return g.Store.Apply(b)
}

func (g *gatedStore) appliesSoFar() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.applies
}

func newGatedStore() *gatedStore {
	g := &gatedStore{Store: persistence.NewMemory(), gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	close(g.gate)
	return g
}
