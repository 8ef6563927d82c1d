package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"mqttd"
	"mqttd/auth/passwd"
	"mqttd/bridge"
	"mqttd/internal/testutil"
)

// gatewayConf is a gateway's mosquitto.conf: devices on the LAN and in
// browsers, a TLS listener for devices with certificates, a local unix
// socket, and a TLS bridge to a cloud broker. DIR stands for the test's
// directory, HOST and the ports for where it listens.
const gatewayConf = `# Gateway 7: devices in, cloud out
per_listener_settings false
allow_anonymous false
password_file DIR/passwd
acl_file DIR/acl

persistence true
persistence_location DIR/data/
autosave_interval 1800
max_inflight_messages 20
max_queued_messages 5000
max_queued_bytes 10485760
max_packet_size 262144
max_keepalive 300
persistent_client_expiration 14d
sys_interval 30
log_type error
log_type warning

listener PORT1 HOST
max_connections 500

listener PORT2 HOST
certfile DIR/server.pem
keyfile DIR/server.key
cafile DIR/server.pem
require_certificate true
use_identity_as_username true
tls_version tlsv1.3

listener PORT3 HOST
protocol websockets
max_topic_alias 10

listener 0 DIR/mqtt.sock

connection cloud
address REMOTE1 REMOTE2
round_robin true
remote_clientid gateway-7
remote_username gw7
remote_password s3cret: pa#ss
bridge_protocol_version mqttv50
bridge_cafile DIR/server.pem
bridge_certfile DIR/client.pem
bridge_keyfile DIR/client.key
keepalive_interval 30
restart_timeout 5 60
try_private false
notifications true
notification_topic gateways/gw7/bridge
notifications_local_only true
max_queued_messages 20000
topic sensors/# out 1 "" site7/
topic commands/# in 2 local/ cloud/gw7/
topic sync/# both 1
topic "" out 0 status/online gw7/online
topic alarms/#
`

// writeGateway writes gatewayConf and the files it names into dir, with
// host and the ports substituted, and returns its path.
func writeGateway(t *testing.T, dir, host string, ports [3]int, remotes [2]string) string {
	t.Helper()
	if err := passwd.Set(filepath.Join(dir, "passwd"), "gw7", []byte("pw"), true); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "acl"), "user gw7\ntopic readwrite sensors/#\n")
	testutil.WriteSelfSigned(t, filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"), "gateway")
	testutil.WriteSelfSigned(t, filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key"), "gw7")
	conf := strings.NewReplacer("DIR", dir, "HOST", host, "PORT1", fmt.Sprint(ports[0]), "PORT2", fmt.Sprint(ports[1]),
		"PORT3", fmt.Sprint(ports[2]), "REMOTE1", remotes[0], "REMOTE2", remotes[1]).Replace(gatewayConf)
	path := filepath.Join(dir, "mosquitto.conf")
	writeFile(t, path, conf)
	return path
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// runImportFile runs `mqttd import path`.
func runImportFile(t *testing.T, path string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errs bytes.Buffer
	code = run([]string{"import", path}, noEnv, &out, &errs, nil)
	return out.String(), errs.String(), code
}

// decodeImported reads the YAML as the broker would.
func decodeImported(t *testing.T, out string) config {
	t.Helper()
	cfg := defaults()
	if err := decodeConfig("imported", []byte(out), &cfg); err != nil {
		t.Fatalf("the output does not decode: %v\n%s", err, out)
	}
	return cfg
}

// checkConfigPasses writes the YAML to a file and runs `mqttd
// check-config` on it, which also loads the files it names.
func checkConfigPasses(t *testing.T, out string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mqttd.yaml")
	writeFile(t, path, out)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"check-config", path}, noEnv, &stdout, &stderr, nil); code != 0 {
		t.Fatalf("check-config: exit %d\n%s\nthe file:\n%s", code, stderr.String(), out)
	}
}

func TestImportGateway(t *testing.T) {
	dir := t.TempDir()
	path := writeGateway(t, dir, "0.0.0.0", [3]int{1883, 8883, 9001},
		[2]string{"cloud1.example.com:8883", "cloud2.example.com:8883"})
	out, stderr, code := runImportFile(t, path)
	if code != importOK {
		t.Fatalf("exit %d, want 0 (everything translates):\n%s", code, stderr)
	}
	if !strings.HasPrefix(out, "# mqttd configuration translated by `mqttd import` from "+path) {
		t.Errorf("no header saying where it came from:\n%s", out)
	}
	checkConfigPasses(t, out)
	cfg := decodeImported(t, out)

	wantListeners := []mqttd.ListenerConfig{
		{Type: "tcp", Address: "0.0.0.0:1883", MaxConnections: 500},
		{Type: "tls", Address: "0.0.0.0:8883", CertFile: dir + "/server.pem", KeyFile: dir + "/server.key",
			ClientCAFile: dir + "/server.pem", RequireClientCert: true, UseIdentityAsUsername: true, MinVersion: "1.3"},
		{Type: "ws", Address: "0.0.0.0:9001"},
		{Type: "unix", Path: dir + "/mqtt.sock"},
	}
	if !reflect.DeepEqual(cfg.Listeners, wantListeners) {
		t.Errorf("listeners:\n got %+v\nwant %+v", cfg.Listeners, wantListeners)
	}
	wantAuth := mqttd.AuthConfig{PasswordFile: dir + "/passwd", ACLFile: dir + "/acl", AllowAnonymous: new(false)}
	if !reflect.DeepEqual(cfg.Auth.AuthConfig, wantAuth) {
		t.Errorf("auth: got %+v, want %+v", cfg.Auth.AuthConfig, wantAuth)
	}
	l := cfg.Limits
	if cfg.DataDir != dir+"/data/" || l.MaxInflight != 20 || l.MaxQueuedBytes != 10485760 ||
		l.MaxPacketSize != 262144 || l.MaxQueued != 20000 || l.MaxKeepAlive != 300 || l.PersistentSessionExpiry != 14*24*time.Hour ||
		cfg.SysInterval != 30*time.Second || cfg.Log.Level != "warn" {
		t.Errorf("data_dir, limits, sys_interval or log level not carried over:\n%s", out)
	}
	checkGatewayBridge(t, cfg.Bridges)
	if strings.Contains(out, "max_topic_alias") {
		t.Errorf("a limit at mqttd's default was written out:\n%s", out)
	}
	if strings.Contains(out, "redacted") || !strings.Contains(stderr, "remote_password") {
		t.Errorf("the password was not written, or not warned about:\n%s\n%s", out, stderr)
	}
}

func checkGatewayBridge(t *testing.T, bridges []bridge.Config) {
	t.Helper()
	if len(bridges) != 1 {
		t.Fatalf("%d bridges, want 1", len(bridges))
	}
	b := bridges[0]
	want := bridge.Config{Name: "cloud", Addresses: []string{"tls://cloud1.example.com:8883", "tls://cloud2.example.com:8883"},
		RoundRobin: true, ClientID: "gateway-7", Username: "gw7", Password: "s3cret: pa#ss",
		KeepAlive: 30 * time.Second, NoTryPrivate: true,
		TLS:          b.TLS, // checked below
		ReconnectMin: 5 * time.Second, ReconnectMax: time.Minute, MaxQueuedMessages: 20000,
		StateTopic: "gateways/gw7/bridge", StateNumeric: true,
		Topics: []bridge.Rule{
			{Pattern: "sensors/#", Direction: "out", QoS: new(1), RemotePrefix: "site7/"},
			{Pattern: "commands/#", Direction: "in", QoS: new(2), LocalPrefix: "local/", RemotePrefix: "cloud/gw7/"},
			{Pattern: "sync/#", Direction: "both", QoS: new(1)},
			{Pattern: "", Direction: "out", QoS: new(0), LocalPrefix: "status/online", RemotePrefix: "gw7/online"},
			{Pattern: "alarms/#", Direction: "out", QoS: new(0)},
		}}
	if !reflect.DeepEqual(b, want) {
		t.Errorf("bridge:\n got %+v\nwant %+v", b, want)
	}
	if !strings.HasSuffix(b.TLS.CAFile, "/server.pem") || !strings.HasSuffix(b.TLS.CertFile, "/client.pem") ||
		!strings.HasSuffix(b.TLS.KeyFile, "/client.key") {
		t.Errorf("bridge tls: %+v", b.TLS)
	}
}

// TestImportNamesWhatItLeavesOut: every option without an mqttd
// equivalent is named with its file, line and why, and the exit code
// says something was left out; the rest still translates.
func TestImportNamesWhatItLeavesOut(t *testing.T) {
	lines := []struct{ text, want string }{
		{"listener 1883 127.0.0.1", ""},
		{"bind_interface eth0", "not supported by mqttd"},
		{"mount_point site7/", "not supported by mqttd"},
		{"max_qos 1", "not supported by mqttd"},
		{"http_dir /var/www", "not supported by mqttd"},
		{"use_subject_as_username true", "not supported by mqttd"},
		{"psk_file /etc/mosquitto/psk", "TLS-PSK"},
		{"auth_plugin /usr/lib/auth.so", "Options.Authenticator"},
		{"auth_opt_backend files", "plugin"},
		{"plugin /usr/lib/dynsec.so", "no plugins"},
		{"persistence false", "mqttd does this differently: it always keeps"},
		{"retain_available false", "not supported by mqttd"},
		{"upgrade_outgoing_qos true", "not supported by mqttd"},
		{"log_dest syslog", "mqttd does this differently"},
		{"log_type subscribe", "not supported by mqttd"},
		{"frobnicate 3", "unknown option"},
		{"listener 8883 127.0.0.1", "left out: require_certificate needs the CAs in cafile"},
		{"certfile /etc/mosquitto/server.pem", ""},
		{"keyfile /etc/mosquitto/server.key", ""},
		{"capath /etc/mosquitto/ca.d", "mqttd does this differently: it takes one CA file"},
		{"require_certificate true", ""},
		{"connection cloud", ""},
		{"address 127.0.0.1", ""},
		{"topic # out", ""},
		{"notifications_local_only true", ""},
		{"bridge_protocol_version mqttv31", "not supported by mqttd: MQTT 3.1"},
		{"start_type lazy", "not supported by mqttd"},
		{"bridge_max_packet_size 1000", "not supported by mqttd"},
		{"bridge_outgoing_retain false", "not supported by mqttd"},
		{"bridge_receive_maximum 10", "not supported by mqttd"},
		{"bridge_identity gw7", "TLS-PSK"},
		{"autosave_interval 60", "not needed:"},
	}
	var conf strings.Builder
	for _, l := range lines {
		conf.WriteString(l.text + "\n")
	}
	path := filepath.Join(t.TempDir(), "mosquitto.conf")
	writeFile(t, path, conf.String())
	out, stderr, code := runImportFile(t, path)
	if code != importLeftOut {
		t.Errorf("exit %d, want %d", code, importLeftOut)
	}
	for i, l := range lines {
		key := strings.Fields(l.text)[0]
		prefix := fmt.Sprintf("%s:%d: %s: ", path, i+1, key)
		named := findingFor(stderr, prefix)
		if l.want != "" && !strings.Contains(named, l.want) {
			t.Errorf("line %d (%s) not named as %q:\n%s", i+1, l.text, l.want, stderr)
		}
		for _, f := range strings.Split(named, "\n") {
			if l.want == "" && f != "" && !strings.HasPrefix(f, prefix+"note: ") {
				t.Errorf("line %d (%s) translates, but was named:\n%s", i+1, l.text, stderr)
			}
		}
	}
	if !strings.Contains(out, "# Not translated (") || !strings.Contains(out, "bind_interface: not supported") {
		t.Errorf("the output's header does not list what was left out:\n%s", out)
	}
	cfg := decodeImported(t, out)
	if len(cfg.Bridges) != 1 || cfg.Bridges[0].Protocol != "3.1.1" || len(cfg.Listeners) != 1 {
		t.Errorf("the translatable options were not kept:\n%s", out)
	}
	checkConfigPasses(t, out)
}

// findingFor returns the lines of stderr that start with prefix.
func findingFor(stderr, prefix string) string {
	var found []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, prefix) {
			found = append(found, l)
		}
	}
	return strings.Join(found, "\n")
}

// TestImportFollowsIncludeDir reads the .conf files of include_dir in
// Mosquitto's order (upper case before lower case of one letter) and
// names problems in them with their own file and line.
func TestImportFollowsIncludeDir(t *testing.T) {
	dir := t.TempDir()
	confd := filepath.Join(dir, "conf.d")
	if err := os.Mkdir(confd, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(confd, "B.conf"), "# last\nlistener 1886 127.0.0.1\nmount_point b/\n")
	writeFile(t, filepath.Join(confd, "A.conf"), "listener 1884 127.0.0.1\n")
	writeFile(t, filepath.Join(confd, "a.conf"), "listener 1885 127.0.0.1\nmax_inflight_messages 7\n")
	writeFile(t, filepath.Join(confd, "notes.txt"), "frobnicate 1\n")
	path := filepath.Join(dir, "mosquitto.conf")
	writeFile(t, path, "allow_anonymous true\ninclude_dir "+confd+"\n")
	out, stderr, code := runImportFile(t, path)
	if code != importLeftOut || !strings.Contains(stderr, filepath.Join(confd, "B.conf")+":3: mount_point: not supported") {
		t.Errorf("exit %d; the mount_point of B.conf not named with its file and line:\n%s", code, stderr)
	}
	if strings.Contains(stderr, "frobnicate") {
		t.Errorf("a file not ending in .conf was read:\n%s", stderr)
	}
	cfg := decodeImported(t, out)
	var addrs []string
	for _, lc := range cfg.Listeners {
		addrs = append(addrs, lc.Address)
	}
	if want := []string{"127.0.0.1:1884", "127.0.0.1:1885", "127.0.0.1:1886"}; !reflect.DeepEqual(addrs, want) {
		t.Errorf("listeners %v, want %v (Mosquitto's order)", addrs, want)
	}
	if cfg.Limits.MaxInflight != 7 || *cfg.Auth.AllowAnonymous != true {
		t.Errorf("the included options were not carried over:\n%s", out)
	}
	if !strings.Contains(out, "and "+filepath.Join(confd, "A.conf")) {
		t.Errorf("the header does not name the included files:\n%s", out)
	}
}

// TestImportBadLine: a line Mosquitto would refuse is reported with its
// line and left out; the bridge keeps its good rules.
func TestImportBadLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mosquitto.conf")
	writeFile(t, path, "connection cloud\naddress 127.0.0.1:1883\ntopic a/# sideways 1\ntopic b/# out 3\ntopic c/# in 1\n"+
		"notifications false\nrestart_timeout 30 10\n")
	out, stderr, code := runImportFile(t, path)
	for _, want := range []string{
		path + `:3: topic: bad line: "sideways": want out, in or both`,
		path + `:4: topic: bad line: QoS "3": want 0, 1 or 2`,
		path + `:7: restart_timeout: bad line: the cap is lower than the base`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if code != importLeftOut {
		t.Errorf("exit %d, want %d", code, importLeftOut)
	}
	cfg := decodeImported(t, out)
	if len(cfg.Bridges) != 1 || len(cfg.Bridges[0].Topics) != 1 || cfg.Bridges[0].Topics[0].Pattern != "c/#" ||
		cfg.Bridges[0].StateTopic != "-" {
		t.Errorf("want the bridge with its good rule and no state topic:\n%s", out)
	}
}

// TestImportListenerAuth: with per_listener_settings true the security
// options go to their listener's auth block; without a listener line the
// deprecated port and bind_address make the default listener.
func TestImportListenerAuth(t *testing.T) {
	dir := t.TempDir()
	if err := passwd.Set(filepath.Join(dir, "passwd"), "alice", []byte("pw"), true); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "mosquitto.conf")
	writeFile(t, path, "per_listener_settings true\nlistener 1883\npassword_file "+dir+"/passwd\n"+
		"listener 1884 127.0.0.1\nallow_anonymous true\n")
	out, stderr, code := runImportFile(t, path)
	if code != importOK {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	checkConfigPasses(t, out)
	cfg := decodeImported(t, out)
	want := []mqttd.ListenerConfig{
		{Type: "tcp", Address: ":1883", Auth: &mqttd.AuthConfig{PasswordFile: dir + "/passwd", AllowAnonymous: new(false)}},
		{Type: "tcp", Address: "127.0.0.1:1884", Auth: &mqttd.AuthConfig{AllowAnonymous: new(true)}},
	}
	if !reflect.DeepEqual(cfg.Listeners, want) || cfg.Auth.PasswordFile != "" || cfg.Auth.AllowAnonymous != nil {
		t.Errorf("per-listener auth:\n%s", out)
	}

	writeFile(t, path, "port 1884\nbind_address 127.0.0.1\npassword_file "+dir+"/passwd\n")
	out, stderr, code = runImportFile(t, path)
	cfg = decodeImported(t, out)
	if code != importOK || len(cfg.Listeners) != 1 || cfg.Listeners[0].Address != "127.0.0.1:1884" ||
		cfg.Auth.AllowAnonymous == nil || *cfg.Auth.AllowAnonymous {
		t.Errorf("exit %d: the default listener, with Mosquitto 2's allow_anonymous false:\n%s\n%s", code, out, stderr)
	}
}

// TestImportSampleIsMosquittos checks that the gateway's sample file is
// one Mosquitto itself accepts: Mosquitto 2.0 has no flag to only check a
// file, so it is started on loopback ports, and its log says whether it
// runs or which line it refused.
func TestImportSampleIsMosquittos(t *testing.T) {
	mosq, err := exec.LookPath("mosquitto")
	if err != nil {
		mosq = "/usr/sbin/mosquitto"
		if _, err := os.Stat(mosq); err != nil {
			t.Skip("mosquitto is not installed")
		}
	}
	dir := t.TempDir()
	var ports [3]int
	for i := range ports {
		ports[i] = testutil.FreePort(t)
	}
	path := writeGateway(t, dir, "127.0.0.1", ports, [2]string{"127.0.0.1:1", "127.0.0.1:2"})
	conf, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	extra := "log_dest stderr\nlog_type all\n"
	if os.Getuid() == 0 {
		extra += "user root\n" // else Mosquitto becomes mosquitto, who cannot read the test's directory
	}
	writeFile(t, path, string(conf)+extra)
	cmd := exec.Command(mosq, "-c", path)
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var log []string
	deadline := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("mosquitto refused the sample:\n%s", strings.Join(log, "\n"))
			}
			log = append(log, l)
			if strings.Contains(l, " running") {
				return
			}
		case <-deadline:
			t.Fatalf("mosquitto neither ran nor refused within 10s:\n%s", strings.Join(log, "\n"))
		}
	}
}

// TestImportBridgeDefaults: what Mosquitto's bridge does by default is
// written out where mqttd's differs (protocol 3.1.1, the state topic and
// its 1/0 payload), a TLS address keeps its port, and the state Mosquitto
// also publishes on the remote is named.
func TestImportBridgeDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mosquitto.conf")
	writeFile(t, path, "connection c\naddress remote.example.com,[::1]:8883\ntopic x/# out 1\nbridge_capath /etc/ssl/certs/\n"+
		"bridge_session_expiry_interval 86400\ncleansession true\nbridge_alpn x-amzn-mqtt-ca\nlocal_clientid gw.local\nbridge_insecure true\n")
	out, stderr, code := runImportFile(t, path)
	host, _ := os.Hostname()
	cfg := decodeImported(t, out)
	if len(cfg.Bridges) != 1 {
		t.Fatalf("no bridge:\n%s\n%s", out, stderr)
	}
	b := cfg.Bridges[0]
	if b.Protocol != "3.1.1" || !reflect.DeepEqual(b.Addresses, []string{"tls://remote.example.com:1883", "tls://[::1]:8883"}) ||
		b.StateTopic != "$SYS/broker/connection/"+host+".c/state" || !b.StateNumeric || b.SessionExpiry != 24*time.Hour ||
		b.TLS.CAFile != "" || !b.CleanStart || !reflect.DeepEqual(b.TLS.ALPN, []string{"x-amzn-mqtt-ca"}) || !b.TLS.Insecure {
		t.Errorf("bridge %+v", b)
	}
	if code != importLeftOut || !strings.Contains(stderr, path+":1: connection: mqttd does this differently: the bridge's state is published on this broker only") {
		t.Errorf("exit %d; the remote notifications not named:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, path+":9: bridge_insecure: mqttd does this differently") || !strings.Contains(stderr, path+":8: local_clientid: not needed") {
		t.Errorf("bridge_insecure or local_clientid not named:\n%s", stderr)
	}
}

// TestImportGlobalOptions translates the broker-wide options one at a
// time, each to its key or, where mqttd differs, named (exit 3).
func TestImportGlobalOptions(t *testing.T) {
	for _, tc := range []struct {
		conf string
		ok   func(config) bool
		code int
	}{
		{"message_size_limit 1000", func(c config) bool { return c.Limits.MaxPacketSize == 1000+128<<10 }, importLeftOut},
		{"max_packet_size 5000\nmessage_size_limit 1000", func(c config) bool { return c.Limits.MaxPacketSize == 5000 }, importLeftOut},
		{"sys_interval 0", func(c config) bool { return c.SysInterval == -time.Second }, importOK},
		{"max_queued_messages 0", func(c config) bool { return c.Limits.MaxQueued == 0 }, importLeftOut},
		{"queue_qos0_messages true", func(c config) bool { return c.Limits.QueueQoS0 }, importOK},
		{"memory_limit 104857600", func(c config) bool { return c.Limits.MaxMemory == 100<<20 }, importOK},
		{"persistent_client_expiration 1y", func(c config) bool { return c.Limits.PersistentSessionExpiry == 365*24*time.Hour }, importOK},
		{"clientid_prefixes gw-", func(c config) bool { return c.Auth.ClientIDPrefix == "gw-" }, importOK},
		{"log_type all", func(c config) bool { return c.Log.Level == "debug" }, importOK},
		{"log_type information\nlog_type none\nlog_type error", func(c config) bool { return c.Log.Level == "error" }, importOK},
		{"log_type none", func(c config) bool { return c.Log.Level == "error" }, importLeftOut},
		{"listener 1884\nsocket_domain ipv6\nlistener 1885\nsocket_domain ipv4", func(c config) bool {
			return len(c.Listeners) == 3 && c.Listeners[1].Address == "[::]:1884" && c.Listeners[2].Address == "0.0.0.0:1885"
		}, importOK},
		{"persistence_location /var/lib/mosquitto/\npersistence_file m.db\nautosave_interval 60",
			func(c config) bool { return c.DataDir == "/var/lib/mosquitto/" }, importOK},
	} {
		path := filepath.Join(t.TempDir(), "mosquitto.conf")
		writeFile(t, path, "listener 1883 127.0.0.1\nallow_anonymous true\n"+tc.conf+"\n")
		out, stderr, code := runImportFile(t, path)
		if code != tc.code || !tc.ok(decodeImported(t, out)) {
			t.Errorf("%q: exit %d (want %d), or not translated:\n%s\n%s", tc.conf, code, tc.code, out, stderr)
		}
	}
}

func TestImportUsageAndMissingFile(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"import"}, noEnv, &stdout, &stderr, nil); code != importUsage || !strings.Contains(stderr.String(), "usage: mqttd import") {
		t.Errorf("no file: exit %d\n%s", code, stderr.String())
	}
	missing := filepath.Join(t.TempDir(), "nope.conf")
	out, errs, code := runImportFile(t, missing)
	if code != importFailed || out != "" || !strings.Contains(errs, "nope.conf") {
		t.Errorf("a missing file: exit %d, stdout %q\n%s", code, out, errs)
	}
}
