package persistence_test

import (
	"testing"

	"mqttd/persistence"
	"mqttd/persistence/storetest"
)

// memoryOpener reopens a Memory by going on with it: its Close keeps the
// state, which is as near as it comes to storage that survives.
type memoryOpener struct{}

func (memoryOpener) Open(t *testing.T) persistence.Store { return persistence.NewMemory() }

func (memoryOpener) Reopen(t *testing.T, old persistence.Store) persistence.Store {
	t.Helper()
	if err := old.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return old
}

func TestMemory(t *testing.T) {
	storetest.Run(t, memoryOpener{})
}
