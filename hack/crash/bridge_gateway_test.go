package crash

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"testing"

	"mqttd"
)

// gateway is the bridging mqttd binary across its restarts.
type gateway struct {
	dataDir, cfg string
	crash        func(*testing.T, *broker)

	b    *broker
	book *addrBook // where its clients connect
	api  string    // the JSON API's base URL
}

// metricsLine is the banner line that names the metrics address.
var metricsLine = regexp.MustCompile(`metrics on http://(127\.0\.0\.1:\d+)/metrics`)

// start runs the gateway and learns its MQTT and JSON API addresses.
func (g *gateway) start(t *testing.T) {
	t.Helper()
	g.b = startBroker(t, g.dataDir, "--config", g.cfg)
	if g.book == nil {
		g.book = newAddrBook(g.b.addr)
	} else {
		g.book.set(g.b.addr)
	}
	// The banner names the metrics address just after the MQTT one.
	pollUntil(t, "the gateway's metrics address in its banner", func() bool {
		m := metricsLine.FindStringSubmatch(g.b.tail())
		if m != nil {
			g.api = "http://" + m[1]
		}
		return m != nil
	})
}

// restart stops the gateway the scenario's way and starts it again on the
// same data directory.
func (g *gateway) restart(t *testing.T) {
	t.Helper()
	g.crash(t, g.b)
	g.start(t)
}

var apiClient = &http.Client{Timeout: ioTimeout}

// bridgeState reads the bridge's state from the gateway's JSON API.
func (g *gateway) bridgeState() (mqttd.BridgeState, error) {
	resp, err := apiClient.Get(g.api + "/api/v1/bridges")
	if err != nil {
		return mqttd.BridgeState{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return mqttd.BridgeState{}, fmt.Errorf("/api/v1/bridges: %s", resp.Status)
	}
	var body struct {
		Bridges []mqttd.BridgeState `json:"bridges"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return mqttd.BridgeState{}, fmt.Errorf("/api/v1/bridges: %w", err)
	}
	if len(body.Bridges) != 1 {
		return mqttd.BridgeState{}, fmt.Errorf("/api/v1/bridges: %d bridges, want 1", len(body.Bridges))
	}
	return body.Bridges[0], nil
}

// waitBridge polls the bridge's state until cond holds, and returns it.
func (g *gateway) waitBridge(t *testing.T, what string, cond func(mqttd.BridgeState) bool) mqttd.BridgeState {
	t.Helper()
	var st mqttd.BridgeState
	var err error
	done := false
	defer func() {
		if !done { // pollUntil gave up
			t.Logf("last bridge state %+v, error %v; the gateway's log:\n%s", st, err, g.b.tail())
		}
	}()
	pollUntil(t, what, func() bool {
		st, err = g.bridgeState()
		return err == nil && cond(st)
	})
	done = true
	return st
}
