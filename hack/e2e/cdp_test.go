package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"mqttd/internal/testutil"
)

// A page in headless Chromium driven over the DevTools protocol: the
// test reads the page's DOM with JavaScript and takes screenshots.

// browserPage is one tab of a headless Chromium the test started.
type browserPage struct {
	t    *testing.T
	conn *websocket.Conn
	id   int
	// onEvent, when set, is given the events that arrive while a
	// command waits for its result (the test's calls poll often).
	onEvent func(method string, params json.RawMessage)
}

// openPage starts Chromium on url with its DevTools protocol on a port
// of its choosing, and connects to the page's target; both end with the
// test.
func openPage(t *testing.T, bin, url string) *browserPage {
	t.Helper()
	profile := t.TempDir()
	browser := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--remote-debugging-port=0", "--window-size=1280,1000", "--hide-scrollbars", "--user-data-dir="+profile, url)
	var out strings.Builder
	browser.Stdout, browser.Stderr = &out, &out
	if err := browser.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		browser.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		browser.Process.Kill()
		<-exited
	})
	// Chromium writes the port it took to DevToolsActivePort.
	var port int
	testutil.WaitFor(t, "Chromium's DevTools port", func() bool {
		b, err := os.ReadFile(filepath.Join(profile, "DevToolsActivePort"))
		if err != nil {
			select {
			case <-exited:
				t.Fatalf("chromium exited:\n%s", out.String())
			default:
			}
			return false
		}
		first, _, _ := strings.Cut(string(b), "\n")
		port, err = strconv.Atoi(first)
		return err == nil
	})
	var wsURL string
	testutil.WaitFor(t, "the page's DevTools target", func() bool {
		res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/json/list", port))
		if err != nil {
			return false
		}
		defer res.Body.Close()
		var targets []struct{ Type, URL, WebSocketDebuggerURL string }
		if json.NewDecoder(res.Body).Decode(&targets) != nil {
			return false
		}
		for _, tg := range targets {
			if tg.Type == "page" && tg.URL == url {
				wsURL = tg.WebSocketDebuggerURL
			}
		}
		return wsURL != ""
	})
	conn, _, err := websocket.DefaultDialer.Dial(wsURL, nil)
	if err != nil {
		t.Fatalf("DevTools: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return &browserPage{t: t, conn: conn}
}

// send sends a DevTools command without waiting for its result, and
// returns its id.
func (p *browserPage) send(method string, params any) (int, error) {
	p.id++
	p.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return p.id, p.conn.WriteJSON(map[string]any{"id": p.id, "method": method, "params": params})
}

// call sends a DevTools command and decodes its result into result.
func (p *browserPage) call(method string, params, result any) error {
	id, err := p.send(method, params)
	if err != nil {
		return err
	}
	p.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		var msg struct {
			ID     int             `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := p.conn.ReadJSON(&msg); err != nil {
			return err
		}
		if msg.Method != "" && p.onEvent != nil {
			p.onEvent(msg.Method, msg.Params)
		}
		if msg.ID != id { // an event, or the result of a command sent
			continue
		}
		if msg.Error != nil {
			return fmt.Errorf("%s: %s", method, msg.Error.Message)
		}
		if result == nil {
			return nil
		}
		return json.Unmarshal(msg.Result, result)
	}
}

// eval runs a JavaScript expression in the page and returns its value,
// awaited when it is a promise.
func (p *browserPage) eval(expr string, value any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	err := p.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r)
	if err != nil {
		return err
	}
	if e := r.ExceptionDetails; e != nil {
		return fmt.Errorf("%s: %s %s", expr, e.Text, e.Exception.Description)
	}
	if value == nil || r.Result.Value == nil {
		return nil
	}
	return json.Unmarshal(r.Result.Value, value)
}

// run evaluates expr, failing the test if it throws.
func (p *browserPage) run(expr string) {
	p.t.Helper()
	if err := p.eval(expr, nil); err != nil {
		p.t.Fatal(err)
	}
}

// text is the value of a JavaScript expression that gives a string;
// "" while it throws (the page is not there yet).
func (p *browserPage) text(expr string) string {
	p.t.Helper()
	var s string
	if err := p.eval(expr, &s); err != nil {
		if strings.Contains(err.Error(), "websocket") {
			p.t.Fatal(err)
		}
		return ""
	}
	return s
}

// screenshot saves a PNG of the whole page in dir and logs where.
func (p *browserPage) screenshot(dir, name string) {
	p.t.Helper()
	var size struct{ Width, Height float64 }
	if err := p.eval(`({width: window.innerWidth, height: document.documentElement.scrollHeight})`, &size); err != nil {
		p.t.Fatal(err)
	}
	var r struct {
		Data []byte `json:"data"` // base64 in the JSON
	}
	clip := map[string]any{"x": 0, "y": 0, "width": size.Width, "height": size.Height, "scale": 1}
	if err := p.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true, "clip": clip}, &r); err != nil {
		p.t.Fatal(err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, r.Data, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot: %s", path)
}

// answerLogins has the browser answer the HTTP authentication challenges
// of requests to URLs matching pattern with user and password, as its
// user would in the browser's own prompt (which headless Chromium does
// not show); the other requests it lets through unchanged.
func (p *browserPage) answerLogins(pattern, user, password string) {
	p.t.Helper()
	p.onEvent = func(method string, params json.RawMessage) {
		var ev struct {
			RequestID string `json:"requestId"`
		}
		if json.Unmarshal(params, &ev) != nil || ev.RequestID == "" {
			return
		}
		switch method {
		case "Fetch.requestPaused":
			p.send("Fetch.continueRequest", map[string]any{"requestId": ev.RequestID})
		case "Fetch.authRequired":
			p.send("Fetch.continueWithAuth", map[string]any{"requestId": ev.RequestID, "authChallengeResponse": map[string]any{
				"response": "ProvideCredentials", "username": user, "password": password}})
		}
	}
	if err := p.call("Fetch.enable", map[string]any{"handleAuthRequests": true,
		"patterns": []map[string]any{{"urlPattern": pattern}}}, nil); err != nil {
		p.t.Fatal(err)
	}
}

// navigate loads url in the page.
func (p *browserPage) navigate(url string) {
	p.t.Helper()
	if err := p.call("Page.navigate", map[string]any{"url": url}, nil); err != nil {
		p.t.Fatal(err)
	}
}
