package cluster

import (
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The retained stream is written with acknowledgements. A retained
// message goes to the other nodes live on its retained subject (core
// NATS, as any message), and to the stream on its kept subject, a
// JetStream publication this node repeats until the stream has it: while
// JetStream elects a leader for the stream (a node lost, a netsplit) a
// message sent without waiting for the stream would be delivered live
// but never kept, and a node that was away would never have it. A
// message repeated is kept once (its message id), and one replaced on
// this node meanwhile is not repeated: the newer value is, so the
// stream's latest for a topic is the latest this node sent.

// keptPrefix is the subject prefix of the retained stream's messages.
func keptPrefix(cluster string) string { return "mqttd." + cluster + ".k." }

// keptQueue bounds the retained messages waiting for the stream; past it
// they are dropped from the stream (delivered live all the same) and
// counted in Stats.KeptDropped.
const keptQueue = 8192

// keptBatch is the most retained messages in flight to the stream at
// once.
const keptBatch = 256

type keptMsg struct {
	msg *nats.Msg
	seq uint64
}

// keepRetainedMsg queues msg, sent live on its retained subject, for the
// stream, on its kept subject.
func (n *Node) keepRetainedMsg(msg *nats.Msg) {
	rest := strings.TrimPrefix(msg.Subject, retainedPrefix(n.cluster))
	n.keptSeq++
	// A header of its own: the publication adds its message id.
	h := make(nats.Header, len(msg.Header)+1)
	for key, v := range msg.Header {
		h[key] = v
	}
	k := keptMsg{msg: &nats.Msg{Subject: keptPrefix(n.cluster) + rest, Header: h, Data: msg.Data}, seq: n.keptSeq}
	select {
	case n.kept <- k:
	default:
		n.stats.keptDropped.Add(1)
		if n.warn.allow() {
			n.log.Warn().Msg("cluster: retained messages waiting for the replicated stream at their bound: one is only delivered live")
		}
	}
}

// keeper writes the queued retained messages to the stream, a batch at
// a time, each batch repeated (but what a newer message of the same
// topic replaced) until the stream has acknowledged it, until Close.
func (n *Node) keeper() {
	defer close(n.keeperDone)
	select {
	case <-n.storeDone:
	case <-n.stopKeep:
		return
	}
	st := n.store.Load()
	if st == nil {
		return
	}
	latest := map[string]uint64{} // kept subject → the newest seq queued
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var batch []keptMsg
	for {
		if len(batch) == 0 {
			select {
			case k := <-n.kept:
				batch = append(batch, k)
			case <-n.stopKeep:
				return
			}
		}
	fill:
		for len(batch) < keptBatch {
			select {
			case k := <-n.kept:
				batch = append(batch, k)
			default:
				break fill
			}
		}
		for _, k := range batch {
			latest[k.msg.Subject] = max(latest[k.msg.Subject], k.seq)
		}
		batch = n.publishKept(st.js, batch, latest)
		if len(batch) == 0 {
			continue
		}
		select {
		case <-n.stopKeep:
			return
		case <-tick.C:
		}
	}
}

// publishKept publishes batch to the stream and returns what is to be
// repeated: what the stream did not acknowledge, less what a newer
// message of its topic replaced.
func (n *Node) publishKept(js jetstream.JetStream, batch []keptMsg, latest map[string]uint64) []keptMsg {
	futures := make([]jetstream.PubAckFuture, len(batch))
	for i, k := range batch {
		id := n.incarnation + "k" + strconv.FormatUint(k.seq, 36)
		f, err := js.PublishMsgAsync(k.msg, jetstream.WithMsgID(id))
		if err == nil {
			futures[i] = f
		}
	}
	var again []keptMsg
	timeout := time.After(storeTimeout)
	for i, k := range batch {
		ok := false
		if f := futures[i]; f != nil {
			select {
			case <-f.Ok():
				ok = true
			case <-f.Err():
			case <-timeout:
			}
		}
		switch {
		case ok || latest[k.msg.Subject] != k.seq:
			if latest[k.msg.Subject] == k.seq {
				delete(latest, k.msg.Subject)
			}
		default:
			again = append(again, k)
		}
	}
	if len(again) > 0 {
		n.stats.keptRetries.Add(uint64(len(again)))
	}
	return again
}
