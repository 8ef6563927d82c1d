package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"mqttd"
)

// TestHTTPTopics: /api/v1/topics answers its shape, empty at the first
// read (which switches counting on), then the topics paho clients
// published to, busiest first, each client's bytes in the clients list.
func TestHTTPTopics(t *testing.T) {
	b := startBroker(t, mqttd.Options{}, "main")
	base := b.serve(t, httpOptions{})
	if _, body := get(t, base+"/api/v1/topics"); strings.TrimSpace(body) != "{\n  \"topics\": [],\n  \"window_seconds\": 0\n}" {
		t.Fatalf("first read: %s", body)
	}
	pub := pahoClient(t, b.addr(), "pub", nil)
	for i := range 12 {
		pahoWait(t, pub.Publish("site/1/temp", 1, false, "21.5"))
		if i < 5 {
			pahoWait(t, pub.Publish("site/2/door", 1, false, "open"))
		}
	}
	pahoWait(t, pub.Publish("site/3/x", 1, false, "x"))
	var got map[string]json.RawMessage
	getJSON(t, base+"/api/v1/topics?limit=2", &got)
	var topics []map[string]any
	if err := json.Unmarshal(got["topics"], &topics); err != nil || len(got) != 2 || got["window_seconds"] == nil {
		t.Fatalf("answer %s: %v", got, err)
	}
	want := `[map[messages:12 rate:%v topic:site/1/temp] map[messages:5 rate:%v topic:site/2/door]]`
	if have := fmt.Sprint(topics); have != fmt.Sprintf(want, topics[0]["rate"], topics[1]["rate"]) {
		t.Fatalf("topics %s", have)
	}
	if code, body := get(t, base+"/api/v1/topics?limit=0"); code != http.StatusBadRequest {
		t.Fatalf("limit=0: %d %s", code, body)
	}
	var c struct{ Client mqttd.ClientState }
	getJSON(t, base+"/api/v1/clients/pub", &c)
	// 18 PUBLISHes of at least 15 bytes each, 18 PUBACKs of 4.
	if c.Client.BytesIn < 18*15 || c.Client.BytesOut < 18*4 {
		t.Fatalf("pub's bytes: %d in, %d out", c.Client.BytesIn, c.Client.BytesOut)
	}
}

// TestCtlTop runs `mqttd ctl top --count 2` against a broker where one
// paho client publishes all the time and another idles: the second
// refresh names the busy client first, with its rate, and its topic; the
// output, not a terminal, has no ANSI codes; --json is one refresh.
func TestCtlTop(t *testing.T) {
	b := startBroker(t, mqttd.Options{Version: "v7"}, "main")
	base := b.serve(t, httpOptions{})
	env := map[string]string{"MQTTD_API": base}
	pahoClient(t, b.addr(), "a-idle", nil) // first by client id
	busy := pahoClient(t, b.addr(), "busy-pub", nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		deadline := time.Now().Add(20 * time.Second)
		for i := 0; i < 200_000 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			busy.Publish("plant/line-3/speed", 1, false, "1200").WaitTimeout(time.Second)
		}
	}()
	defer wg.Wait()
	defer close(stop)

	out := ctlOK(t, env, "top", "--count", "2")
	t.Log(out)
	if strings.Contains(out, "\x1b[") {
		t.Fatalf("ANSI codes in output that is not a terminal:\n%q", out)
	}
	refreshes := strings.Split(out, "mqttd v7 ")
	if len(refreshes) != 3 {
		t.Fatalf("want 2 refreshes:\n%s", out)
	}
	second := refreshes[2]
	if !regexp.MustCompile(`CLIENT ID.*\nbusy-pub +[1-9][0-9.]* (B|KiB|MiB) `).MatchString(second) {
		t.Fatalf("busy-pub not the busiest client with a rate:\n%s", second)
	}
	if !regexp.MustCompile(`TOPIC.*\nplant/line-3/speed +[0-9.]+ +[1-9][0-9]*\n`).MatchString(second) {
		t.Fatalf("plant/line-3/speed not the busiest topic:\n%s", second)
	}
	if !strings.Contains(second, "connections 2") {
		t.Fatalf("no connections count:\n%s", second)
	}

	var v topView
	if err := json.Unmarshal([]byte(ctlOK(t, env, "--json", "top")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Overview.Version != "v7" || len(v.Clients) != 2 || v.Clients[0].ID != "busy-pub" ||
		len(v.Topics.Topics) == 0 || v.Topics.Topics[0].Topic != "plant/line-3/speed" {
		t.Fatalf("--json: %+v", v)
	}
}

// TestCtlTopSessionPages: ctl top reads a bounded number of pages of
// sessions, says when there were more, and reads them all otherwise.
func TestCtlTopSessionPages(t *testing.T) {
	b := startBroker(t, mqttd.Options{}, "main")
	base := b.serve(t, httpOptions{})
	for _, id := range []string{"c-1", "c-2", "c-3"} {
		pahoClient(t, b.addr(), id, nil)
	}
	var out strings.Builder
	c := &ctl{api: base, out: &out, client: http.DefaultClient}
	var more bool
	list, err := c.sessionsUpTo(2, 1, &more)
	if err != nil || len(list) != 2 || list[1].ID != "c-2" || !more {
		t.Fatalf("2 pages of 1: %+v, more %v, %v", list, more, err)
	}
	if list, err = c.sessionsUpTo(5, 1, &more); err != nil || len(list) != 3 || more {
		t.Fatalf("5 pages of 1: %+v, more %v, %v", list, more, err)
	}
	if err := c.showTop(&topView{More: true}); err != nil || !strings.Contains(out.String(), "the busiest of the first 5000 sessions") {
		t.Fatalf("%v:\n%s", err, out.String())
	}
}
