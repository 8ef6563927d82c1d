package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/packets"
)

// ctlRun runs `mqttd ctl args...` with env as its environment and
// returns its exit status, output and errors.
func ctlRun(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errs strings.Builder
	code = run(append([]string{"ctl"}, args...), func(k string) string { return env[k] }, &out, &errs, nil)
	return code, out.String(), errs.String()
}

// ctlOK runs ctl expecting status 0 and returns its output.
func ctlOK(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	code, out, errs := ctlRun(t, env, args...)
	if code != 0 {
		t.Fatalf("mqttd ctl %s: status %d, %s", strings.Join(args, " "), code, errs)
	}
	return out
}

// TestCtl drives every command of mqttd ctl against a broker with real
// clients, finding it through MQTTD_API and --api: the tables people
// read, --json for scripts, the actions' effects, and the errors' exit
// status and line.
func TestCtl(t *testing.T) {
	b := startBroker(t, mqttd.Options{Version: "v7", Limits: mqttd.Limits{MaxQueued: 1}}, "main")
	base := b.serve(t, httpOptions{reload: func() error { return nil }})
	env := map[string]string{"MQTTD_API": base}

	off := pahoClient(t, b.addr(), "sensor-off", func(o *paho.ClientOptions) { o.SetCleanSession(false).SetUsername("ann") })
	pahoWait(t, off.Subscribe("t/#", 1, nil))
	off.Disconnect(10)
	waitFor(t, "sensor-off offline", func() bool { return b.srv.Stats().SessionsOnline == 0 })
	cp := &packets.Connect{ProtocolVersion: packets.V5, ClientID: "dev", KeepAlive: 30}
	cp.Properties.SessionExpiry = 600
	cp.Properties.Set(packets.PropSessionExpiry)
	dev := dialMQTT(t, b.addr(), cp)
	dev.subscribe("cmd/#", 1)
	pub := pahoClient(t, b.addr(), "pub", nil)
	for _, topic := range []string{"t/1", "t/2"} {
		pahoWait(t, pub.Publish(topic, 1, false, topic))
	}
	pahoWait(t, pub.Publish("r/1", 1, true, "hello"))
	waitFor(t, "a dead letter", func() bool { l, _ := b.srv.DeadLetters("", 0, 0); return len(l) == 1 })

	for _, tc := range []struct {
		args []string
		want []string // regexps, each on a line of the output
	}{
		{[]string{"overview"}, []string{`^version\s+v7$`, `^sessions\s+2 online, 1 offline$`, `^listener main\s+127\.0\.0\.1:\d+$`,
			`^dead letters queue_full\s+1$`}},
		{[]string{"clients"}, []string{`^CLIENT ID\s+USERNAME\s+STATE`, `^dev\s+online\s+127\.0\.0\.1:\d+\s+5\.0\s+1\s`,
			`^sensor-off\s+ann\s+offline \d+s\s`}},
		{[]string{"clients", "--search", "ann"}, []string{`^sensor-off\s+ann`}},
		{[]string{"clients", "--offline"}, []string{`^sensor-off\s+ann\s+offline`}},
		{[]string{"client", "dev"}, []string{`^client id\s+dev$`, `^connected\s+true$`, `^cmd/#\s+1$`}},
		{[]string{"retained", "--payload"}, []string{`^TOPIC\s+QOS\s+SIZE\s+PAYLOAD$`, `^r/1\s+1\s+5\s+"hello"$`}},
		{[]string{"dlq"}, []string{`^\$DLQ/queue_full/t/2\s+queue_full\s+sensor-off\s+0\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+3$`}},
	} {
		out := ctlOK(t, env, tc.args...)
		for _, w := range tc.want {
			if !regexp.MustCompile(`(?m)` + w).MatchString(out) {
				t.Errorf("mqttd ctl %s: no line matching %s in\n%s", strings.Join(tc.args, " "), w, out)
			}
		}
	}
	if n := strings.Count(ctlOK(t, env, "clients", "--search", "ann"), "\n"); n != 2 {
		t.Errorf("clients --search ann: %d lines, want the header and sensor-off", n)
	}

	var list struct {
		Clients []mqttd.ClientState `json:"clients"`
	}
	if err := json.Unmarshal([]byte(ctlOK(t, env, "--json", "clients", "--offline")), &list); err != nil ||
		len(list.Clients) != 1 || list.Clients[0].ID != "sensor-off" {
		t.Errorf("--json clients --offline: %+v %v", list, err)
	}

	if out := ctlOK(t, env, "kick", "dev"); !strings.Contains(out, `disconnected client "dev"`) {
		t.Errorf("kick: %q", out)
	}
	if d, ok := dev.read().(*packets.Disconnect); !ok || d.ReasonCode != packets.AdministrativeAction {
		t.Fatalf("got %+v, want DISCONNECT 0x98", d)
	}
	ctlOK(t, env, "sessions", "rm", "dev")
	if _, ok := b.srv.Client("dev"); ok {
		t.Error("sessions rm: the session is still there")
	}
	dialMQTT(t, b.addr(), cp)
	ctlOK(t, env, "kick", "--discard-session", "dev")
	if _, ok := b.srv.Client("dev"); ok {
		t.Error("kick --discard-session: the session is still there")
	}
	ctlOK(t, env, "retained", "rm", "r/1")
	ctlOK(t, env, "dlq", "rm", "$DLQ/queue_full/t/2")
	if l, _ := b.srv.DeadLetters("", 0, 0); len(l) != 0 || b.srv.Stats().Retained != 0 {
		t.Errorf("after rm: letters %+v, retained %d", l, b.srv.Stats().Retained)
	}
	ctlOK(t, env, "reload")
	defer zerolog.SetGlobalLevel(zerolog.GlobalLevel())
	ctlOK(t, env, "log-level", "warn")
	if zerolog.GlobalLevel() != zerolog.WarnLevel {
		t.Errorf("log-level warn: the level is %s", zerolog.GlobalLevel())
	}

	code, out, errs := ctlRun(t, env, "dlq", "republish", "$DLQ/queue_full/t/2")
	want := "POST " + base + "/api/v1/deadletters/$DLQ%2Fqueue_full%2Ft%2F2/republish: 404 Not Found: "
	if code != 1 || out != "" || !strings.HasPrefix(errs, "mqttd ctl: "+want) || strings.Count(errs, "\n") != 1 {
		t.Errorf("an absent letter: status %d, %q %q; want 1 and one line starting %q", code, out, errs, want)
	}
	if code, _, errs := ctlRun(t, env, "frobnicate"); code != 2 || !strings.Contains(errs, "unknown command") {
		t.Errorf("an unknown command: %d %q", code, errs)
	}
	if code, _, errs := ctlRun(t, env, "client"); code != 2 || !strings.Contains(errs, "want a client id") {
		t.Errorf("client without an id: %d %q", code, errs)
	}
}

// TestCtlFindsTheBroker: --api wins over MQTTD_API; the token comes from
// MQTTD_API_TOKEN or --token-file, and without it the error names the
// URL and the 401; a broker not listening is an error naming the URL.
func TestCtlFindsTheBroker(t *testing.T) {
	b := startBroker(t, mqttd.Options{}, "main")
	const token = "s3cret-T0ken"
	base := b.serve(t, httpOptions{token: token})
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := ctlRun(t, map[string]string{"MQTTD_API": base}, "overview")
	if want := "GET " + base + "/api/v1/overview: 401 Unauthorized"; code != 1 || !strings.Contains(errs, want) {
		t.Errorf("without the token: %d %q, want 1 saying %q", code, errs, want)
	}
	ctlOK(t, map[string]string{"MQTTD_API": base, "MQTTD_API_TOKEN": token}, "overview")
	ctlOK(t, map[string]string{"MQTTD_API": "http://127.0.0.1:1"}, "--api", base, "--token-file", file, "overview")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	code, _, errs = ctlRun(t, map[string]string{"MQTTD_API": dead}, "overview")
	if code != 1 || !strings.Contains(errs, "GET "+dead+"/api/v1/overview") || !strings.Contains(errs, "unless --metrics or metrics.address") {
		t.Errorf("no broker: %d %q, want the URL and how to serve the API", code, errs)
	}
}

// TestCtlHelp: `mqttd help` lists ctl, and `mqttd ctl help` its commands.
func TestCtlHelp(t *testing.T) {
	var out, errs strings.Builder
	if code := run([]string{"help"}, func(string) string { return "" }, &out, &errs, nil); code != 0 ||
		!strings.Contains(errs.String(), "mqttd ctl COMMAND") {
		t.Errorf("mqttd help: %d %q", code, errs.String())
	}
	code, _, help := ctlRun(t, nil, "help")
	for _, cmd := range []string{"overview", "clients [--search TEXT] [--offline]", "kick ID [--discard-session]", "sessions rm ID",
		"retained rm TOPIC", "dlq republish TOPIC", "dlq rm TOPIC", "reload", "log-level LEVEL", "MQTTD_API_TOKEN", "--token-file"} {
		if code != 0 || !strings.Contains(help, cmd) {
			t.Errorf("mqttd ctl help: status %d, %q not in\n%s", code, cmd, help)
		}
	}
}
