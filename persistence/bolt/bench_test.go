package bolt

import (
	"path/filepath"
	"testing"

	"mqttd/persistence"
)

// BenchmarkApplySync measures one Apply under Sync of what a commit
// carries in the durable1 benchmark: 100 messages of 64 bytes, each put
// with its outbound entry to one session, and the deletes of the 100
// before, which their subscriber acknowledged.
func BenchmarkApplySync(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "b.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var batch persistence.Batch
	batch.PutSession(persistence.Session{ID: "sub", Expiry: 3600})
	if err := s.Apply(&batch); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 64)
	id := uint64(0)
	b.ResetTimer()
	for range b.N {
		batch.Reset()
		for range 100 {
			id++
			batch.PutMessage(&persistence.Message{ID: id, Topic: "bench/durable", Payload: payload, QoS: 1})
			batch.PutOutbound("sub", persistence.Outbound{Seq: id, MessageID: id, QoS: 1})
			if id > 100 {
				batch.DeleteOutbound("sub", id-100)
			}
		}
		if err := s.Apply(&batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckpointAcked measures the checkpoint of what durable1's
// commits log when the subscriber acknowledges within walApplyAfter: each
// message put with its entry, and deleted again a window later. Per
// message applied.
func BenchmarkCheckpointAcked(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "b.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var batch persistence.Batch
	batch.PutSession(persistence.Session{ID: "sub", Expiry: 3600})
	if err := s.Apply(&batch); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 64)
	id := uint64(0)
	b.ResetTimer()
	for range b.N / 1000 {
		b.StopTimer()
		for range 10 {
			batch.Reset()
			for range 100 {
				id++
				batch.PutMessage(&persistence.Message{ID: id, Topic: "bench/durable", Payload: payload, QoS: 1})
				batch.PutOutbound("sub", persistence.Outbound{Seq: id, MessageID: id, QoS: 1})
				if id > 100 {
					batch.DeleteOutbound("sub", id-100)
				}
			}
			if err := s.Apply(&batch); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if err := s.checkpoint(0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckpointQueued measures the checkpoint of a bridge's queue
// while its uplink is down: each message put with its entry, none
// deleted, a checkpoint per 10,000 messages (about 2 MiB of the log at
// 200 bytes a message: half a chunk). Per message applied.
func BenchmarkCheckpointQueued(b *testing.B) { benchCheckpointBacklog(b, 0) }

// BenchmarkCheckpointBacklog measures the checkpoint of a backlogged
// bridge: each message put with its entry, and the entry deleted 50,000
// messages later, so that the put and its delete fall in different
// checkpoints and both reach the file. Per message applied.
func BenchmarkCheckpointBacklog(b *testing.B) { benchCheckpointBacklog(b, 50_000) }

func benchCheckpointBacklog(b *testing.B, lag uint64) {
	const perApply, perCheckpoint = 100, 10_000
	s, err := Open(filepath.Join(b.TempDir(), "b.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const sess = "$bridge/bench"
	var batch persistence.Batch
	batch.PutSession(persistence.Session{ID: sess, Expiry: 3600})
	if err := s.Apply(&batch); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 64)
	id := uint64(0)
	queue := func(n int) {
		for range n / perApply {
			batch.Reset()
			for range perApply {
				id++
				batch.PutMessage(&persistence.Message{ID: id, Topic: "bench/bridge", Payload: payload, QoS: 1})
				batch.PutOutbound(sess, persistence.Outbound{Seq: id, MessageID: id, QoS: 1})
				if lag > 0 && id > lag {
					batch.DeleteOutbound(sess, id-lag)
				}
			}
			if err := s.Apply(&batch); err != nil {
				b.Fatal(err)
			}
		}
	}
	queue(int(lag)) // the backlog, in the file before the timer starts
	if err := s.checkpoint(0); err != nil {
		b.Fatal(err)
	}
	written := func() int64 { st := s.db.Stats(); return st.TxStats.GetWrite() }
	pages := written()
	b.ResetTimer()
	for done := 0; done < b.N; done += perCheckpoint {
		b.StopTimer()
		queue(perCheckpoint)
		b.StartTimer()
		if err := s.checkpoint(0); err != nil {
			b.Fatal(err)
		}
	}
	// What the file is written: a commit writes each page it changed once.
	b.ReportMetric(float64(written()-pages)/float64(b.N), "pages/msg")
}
