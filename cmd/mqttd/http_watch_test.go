package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"mqttd"
)

// openWatch starts GET /api/v1/watch?filter=filter and returns its lines
// once the first has come (the broker is subscribed then), and its status.
func openWatch(t *testing.T, base, filter string) (*bufio.Scanner, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/watch?filter="+filter, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode
	}
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || sc.Text() != `{"qos":0}` {
		t.Fatalf("first line %q, want the empty one a watch starts with", sc.Text())
	}
	return sc, resp.StatusCode
}

// nextWatched reads the next line of a watch.
func nextWatched(t *testing.T, sc *bufio.Scanner) watchLine {
	t.Helper()
	if !sc.Scan() {
		t.Fatalf("the watch ended: %v", sc.Err())
	}
	var l watchLine
	if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
		t.Fatalf("line %q: %v", sc.Text(), err)
	}
	return l
}

// TestWatch: a watch streams what the broker routes on its filter with
// the publisher's client id (base64 for a payload that is not UTF-8); a
// bad filter is refused, and at most maxWatches run at once.
func TestWatch(t *testing.T) {
	b := startBroker(t, mqttd.Options{}, "main")
	base := b.serve(t, httpOptions{})
	sc, _ := openWatch(t, base, "t/%23")
	pub := pahoClient(t, b.addr(), "pub", nil)
	pahoWait(t, pub.Publish("t/1", 1, false, "hello"))
	pahoWait(t, pub.Publish("other", 1, false, "not watched"))
	pahoWait(t, pub.Publish("t/2", 0, true, []byte{0xff, 0}))
	if l := nextWatched(t, sc); l.Topic != "t/1" || l.From != "pub" || l.QoS != 1 || l.Payload != "hello" || l.Time == "" {
		t.Errorf("first message %+v", l)
	}
	if l := nextWatched(t, sc); l.Topic != "t/2" || !l.Retain || string(l.PayloadBase64) != "\xff\x00" {
		t.Errorf("second message %+v: want t/2, retained, its bytes in base64", l)
	}

	for _, q := range []string{"", "a/%23/b"} {
		if code, body := get(t, base+"/api/v1/watch?filter="+q); code != http.StatusBadRequest {
			t.Errorf("filter %q: %d %s, want 400", q, code, body)
		}
	}
	for range maxWatches - 1 {
		openWatch(t, base, "x")
	}
	if _, code := openWatch(t, base, "x"); code != http.StatusTooManyRequests {
		t.Errorf("watch %d: %d, want 429", maxWatches+1, code)
	}
}

// TestCtlWatch: mqttd ctl watch prints what it watches, one message a
// line with its publisher, and stops after --count messages.
func TestCtlWatch(t *testing.T) {
	b := startBroker(t, mqttd.Options{}, "main")
	base := b.serve(t, httpOptions{})
	subs := b.srv.Stats().Subscriptions
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		var out, errs strings.Builder
		code := run([]string{"ctl", "--api", base, "watch", "t/#", "--count", "2"}, func(string) string { return "" }, &out, &errs, nil)
		done <- result{code, out.String(), errs.String()}
	}()
	waitFor(t, "the watch to subscribe", func() bool { return b.srv.Stats().Subscriptions == subs+1 })
	pub := pahoClient(t, b.addr(), "sensor-9", nil)
	pahoWait(t, pub.Publish("t/a", 1, false, "21.5"))
	pahoWait(t, pub.Publish("t/b", 0, true, "on"))
	select {
	case r := <-done:
		want := "t/a qos=1 from=sensor-9 21.5\nt/b qos=0 retain from=sensor-9 on\n"
		if r.code != 0 || r.out != want {
			t.Errorf("ctl watch: status %d, printed %q (errors %q), want %q", r.code, r.out, r.err, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ctl watch did not stop after --count 2")
	}
}
