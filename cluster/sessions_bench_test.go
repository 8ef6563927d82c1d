package cluster

import (
	"strconv"
	"testing"

	"mqttd/internal/natstest"
	"mqttd/persistence"
)

// BenchmarkSessionStoreRound is a committer's round on three replicas:
// per op, 64 messages queued for persistent sessions (a message and an
// entry each) written in one Apply, and the acknowledgements of the
// previous round's 64 entries with them, as a steady flow makes them.
func BenchmarkSessionStoreRound(b *testing.B) {
	for _, replicas := range []int{1, 3} {
		b.Run("replicas="+strconv.Itoa(replicas), func(b *testing.B) {
			urls := natstest.Cluster(b, replicas)
			nc := connect(b, urls[0])
			s, err := OpenSessionStore(nc, SessionStoreConfig{Cluster: "c1", Node: "a", Replicas: replicas}, persistence.NewMemory())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			const perRound = 64
			var batch persistence.Batch
			for i := range 8 {
				batch.PutSession(persistence.Session{ID: "s" + strconv.Itoa(i), Expiry: 3600})
			}
			if err := s.Apply(&batch); err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 64)
			var id, seq uint64
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				batch.Reset()
				for j := range perRound {
					sess := "s" + strconv.Itoa(j%8)
					if seq >= perRound {
						batch.DeleteOutbound(sess, seq-perRound+1)
					}
					id++
					seq++
					batch.PutMessage(&persistence.Message{ID: id, Topic: "t/x", Payload: payload, QoS: 1})
					batch.PutOutbound(sess, persistence.Outbound{Seq: seq, MessageID: id, QoS: 1})
				}
				if err := s.Apply(&batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*perRound)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
