package mqttd_test

import (
	"bufio"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"mqttd"
	"mqttd/packets"
)

// retainedResidue is the most of the heap growth that may stay once the
// retained messages are cleared: what the store and the reader keep for
// the next burst, not a copy of the burst.
const retainedResidue = 8 << 20

// TestAttackRetainedStoreDurable is TestAttackRetainedStore with the
// bbolt store the mqttd command keeps by default (a DataDir, durability
// sync): 200 retained messages of 1 MiB, then cleared. The store's log
// applier read its whole log into one buffer, kept up to 16 MiB of it,
// and gave bbolt the log in one transaction: the heap stayed 10 MB up
// after the messages were cleared.
func TestAttackRetainedStoreDurable(t *testing.T) {
	attackRetainedStore(t, mqttd.Options{DataDir: t.TempDir()}, ", bbolt store")
}

// resubscriber loops SUBSCRIBE and UNSUBSCRIBE of a filter at QoS 0 on a
// raw 3.1.1 connection and counts the retained PUBLISHes it is sent
// (live ones, such as the ordinary client's, are not counted), reading
// them as they come without decoding them.
type resubscriber struct {
	nc net.Conn
	br *bufio.Reader
}

func dialResubscriber(t *testing.T, addr, id string) *resubscriber {
	t.Helper()
	rc := connectAs(t, addr, packets.V311, &packets.Connect{ClientID: id, CleanStart: true})
	return &resubscriber{nc: rc.nc, br: bufio.NewReaderSize(rc.nc, 64<<10)}
}

// loop sends n SUBSCRIBE and UNSUBSCRIBE pairs of filter in one write,
// then a PINGREQ, and reads up to the PINGRESP: every retained message
// sent for the loop comes before it. It runs on a worker goroutine, so it
// returns an error rather than failing the test.
func (r *resubscriber) loop(filter string, n int) (retained int, err error) {
	var out []byte
	for i := range n {
		id := uint16(2*i + 1)
		out, _ = (&packets.Subscribe{PacketID: id, Subscriptions: []packets.Subscription{{Filter: filter}}}).Append(out, packets.V311)
		out, _ = (&packets.Unsubscribe{PacketID: id + 1, Filters: []string{filter}}).Append(out, packets.V311)
	}
	out, _ = (&packets.Pingreq{}).Append(out, packets.V311)
	r.nc.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := r.nc.Write(out); err != nil {
		return 0, err
	}
	for {
		fh, err := packets.ReadFrameHeader(r.br, packets.V311, 0)
		if err != nil {
			return retained, err
		}
		if _, err := r.br.Discard(fh.Remaining); err != nil {
			return retained, err
		}
		switch {
		case fh.Type == packets.TypePublish && fh.Flags&1 != 0:
			retained++
		case fh.Type == packets.TypePingresp:
			return retained, nil
		}
	}
}

// publishRetained publishes n retained messages at QoS 0 in one write and
// waits until the broker holds them.
func publishRetained(t *testing.T, srv *mqttd.Server, addr string, n int, payload []byte) {
	t.Helper()
	base := srv.Stats().Retained
	pub := newPublisher(t, addr, packets.V311, "retainer", nil)
	var out []byte
	for i := range n {
		out, _ = (&packets.Publish{Topic: fmt.Sprintf("r/%05d", i), Retain: true, Payload: payload}).Append(out, packets.V311)
	}
	pub.rc.write(out)
	waitFor(t, fmt.Sprintf("%d retained messages", n), func() bool { return srv.Stats().Retained >= base+int64(n) })
	pub.rc.nc.Close()
}

// resubscribeAttack runs the SUBSCRIBE/UNSUBSCRIBE loop of "#" against the
// retained messages already published, with an ordinary client served
// meanwhile and after, and returns how many retained messages the loop
// was sent and how long it took.
func resubscribeAttack(t *testing.T, addr string, loops int) (sent int, took time.Duration) {
	t.Helper()
	r := dialResubscriber(t, addr, "resubscriber")
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		n, err := r.loop("#", loops)
		done <- result{n, err}
	}()
	ordinaryExchange(t, addr, "during")
	res := <-done
	took = time.Since(start)
	if res.err != nil {
		t.Fatalf("the loop, after %d retained messages: %v", res.n, res.err)
	}
	ordinaryExchange(t, addr, "after")
	return res.n, took
}

// retainedAllowed is the most a client may be sent in d at the default
// limits: one allowance, and what comes back of it in d. The broker's
// allowance refills by the wall clock, which may be slewed against the
// test's monotonic one: 100 ms more is allowed for it (a few messages,
// where no bound would send hundreds of thousands).
func retainedAllowed(whole float64, d time.Duration) float64 {
	d += 100 * time.Millisecond
	return whole * (1 + d.Seconds()/mqttd.DefaultRetainedSendRefill.Seconds())
}

// TestAttackRetainedResubscribe: 10,000 small retained messages and a
// client looping SUBSCRIBE and UNSUBSCRIBE "#" 25 times. Each SUBSCRIBE
// was sent every retained message (250,000 for 25 small packets); now
// the client is sent one session's worth (limits.max_inflight +
// limits.max_queued messages) and what comes back of it meanwhile.
func TestAttackRetainedResubscribe(t *testing.T) {
	const retained, loops = 10000, 25
	srv, addr := startServer(t, mqttd.Options{})
	publishRetained(t, srv, addr, retained, []byte("0123456789abcdef"))
	heap := attackBaseline(t, addr)
	base := srv.Stats()

	sent, took := resubscribeAttack(t, addr, loops)
	st := srv.Stats()
	allowed := retainedAllowed(mqttd.DefaultMaxInflight+mqttd.DefaultMaxQueued, took)
	t.Logf("%d loops against %d retained messages in %v: %d sent (at most %.0f allowed, %d without a bound); "+
		"%d subscriptions limited", loops, retained, took.Round(time.Millisecond), sent, allowed, loops*retained,
		st.RetainedSendsLimited-base.RetainedSendsLimited)
	if float64(sent) > allowed {
		t.Errorf("the loop was sent %d retained messages, over the %.0f allowed", sent, allowed)
	}
	if st.RetainedSendsLimited == base.RetainedSendsLimited {
		t.Error("no subscription counted in mqttd_retained_sends_limited_total")
	}
	heap.check("SUBSCRIBE/UNSUBSCRIBE # loop", attackHeapBound)
}

// TestAttackRetainedResubscribeLarge: the loop against retained messages
// of 1 MiB, as many as the store takes at the default limits (20 are
// published; TestAttackRetainedStore publishes 200, which the store takes
// no more of). The bytes of the allowance (limits.max_queued_bytes) bound
// it: one allowance's worth, not one store's worth per SUBSCRIBE.
func TestAttackRetainedResubscribeLarge(t *testing.T) {
	const messages, loops = 20, 8
	srv, addr := startServer(t, mqttd.Options{})
	payload, buf := payloadOf(bigPayload), encodeBuf()
	heap := attackBaseline(t, addr)
	pub := newPublisher(t, addr, packets.V5, "retainer", buf)
	for i := range messages {
		pub.publish(&packets.Publish{Topic: fmt.Sprintf("big/%03d", i), QoS: 1, Retain: true, Payload: payload})
	}
	pub.rc.nc.Close()
	base := srv.Stats()
	size := len("big/000") + len(payload)

	sent, took := resubscribeAttack(t, addr, loops)
	st := srv.Stats()
	allowed := retainedAllowed(mqttd.DefaultMaxQueuedBytes, took) + float64(size) // the last one may overdraw
	t.Logf("%d loops against %d retained messages of 1 MiB in %v: %d sent, %.1f MB (at most %.1f MB allowed, %.1f MB without a bound)",
		loops, base.Retained, took.Round(time.Millisecond), sent, mb(int64(sent*size)), allowed/(1<<20),
		mb(int64(loops)*base.Retained*int64(size)))
	if float64(sent*size) > allowed {
		t.Errorf("the loop was sent %d bytes of retained messages, over the %.0f allowed", sent*size, allowed)
	}
	if st.RetainedSendsLimited == base.RetainedSendsLimited {
		t.Error("no subscription counted in mqttd_retained_sends_limited_total")
	}
	heap.check("SUBSCRIBE/UNSUBSCRIBE # loop, retained messages of 1 MiB", attackHeapBound)
	runtime.KeepAlive(payload)
	runtime.KeepAlive(pub)
}

// TestAttackRetainedStore: 200 retained messages of 1 MiB on distinct
// topics. Past the store's limit they are refused (5.0 publisher: 0x97);
// either answer is fine, the heap is what is checked, at the peak and
// once they are cleared (at most retainedResidue stays).
func TestAttackRetainedStore(t *testing.T) { attackRetainedStore(t, mqttd.Options{}, "") }
