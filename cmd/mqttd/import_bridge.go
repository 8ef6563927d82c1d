package main

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"mqttd/bridge"
)

// mosqBridge is one of Mosquitto's bridges: a connection line and the
// options after it.
type mosqBridge struct {
	at line // the connection line
	c  bridge.Config
	// tls: bridge_cafile, bridge_capath or bridge_certfile, with which
	// Mosquitto speaks TLS to the remote.
	tls               bool
	protocolSet       bool
	notifications     bool
	localOnly         bool
	notificationTopic string
}

var badNameChar = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// newBridge is `connection NAME`.
func (imp *importer) newBridge(l line) {
	name, ok := imp.one(l)
	if !ok {
		return
	}
	for _, b := range imp.bridges {
		if b.at.fields[0] == name {
			imp.bad(l, "a second bridge named %q (Mosquitto refuses it)", name)
			return
		}
	}
	mb := &mosqBridge{at: l, notifications: true}
	mb.c.Name = name
	if fixed := badNameChar.ReplaceAllString(name, "_"); fixed != name || len(name) > 64 {
		mb.c.Name = fixed[:min(len(fixed), 64)]
		// The remote knows the bridge by its client id, which Mosquitto
		// makes of the host name and the bridge's name.
		host, _ := os.Hostname()
		mb.c.ClientID = host + "." + name
		imp.note(l, fmt.Sprintf("named %q, as mqttd's bridge names are letters, digits, '-', '_' and '.'; client_id keeps %q", mb.c.Name, mb.c.ClientID))
	}
	imp.bridges = append(imp.bridges, mb)
	imp.br = mb
}

const lazyWhy = unsupported + ": mqttd's bridges connect at start and again whenever the connection ends"

// bridgeOptions are the options of the current bridge.
var bridgeOptions = map[string]func(*importer, *mosqBridge, line){
	"address":     (*importer).bridgeAddresses,
	"addresses":   (*importer).bridgeAddresses,
	"topic":       (*importer).bridgeTopic,
	"round_robin": func(imp *importer, mb *mosqBridge, l line) { mb.c.RoundRobin, _ = imp.boolean(l) },
	"cleansession": func(imp *importer, mb *mosqBridge, l line) {
		mb.c.CleanStart, _ = imp.boolean(l)
	},
	"try_private": func(imp *importer, mb *mosqBridge, l line) {
		if v, ok := imp.boolean(l); ok {
			mb.c.NoTryPrivate = !v
		}
	},
	"remote_clientid": func(imp *importer, mb *mosqBridge, l line) { mb.c.ClientID, _ = imp.str(l) },
	"remote_username": func(imp *importer, mb *mosqBridge, l line) { mb.c.Username, _ = imp.str(l) },
	"remote_password": func(imp *importer, mb *mosqBridge, l line) {
		if v, ok := imp.str(l); ok {
			mb.c.Password = bridge.Secret(v)
			imp.add(l, "warning: the password is written into the output (password:); better keep it in a file only mqttd can read "+
				"(password_file:) or in the environment (password_env:)", false)
		}
	},
	"keepalive_interval": func(imp *importer, mb *mosqBridge, l line) {
		if n, ok := imp.integer(l, 0, 65535); ok {
			mb.c.KeepAlive = time.Duration(max(n, 5)) * time.Second // Mosquitto's minimum
		}
	},
	"restart_timeout":         (*importer).restartTimeout,
	"bridge_protocol_version": (*importer).bridgeProtocol,
	"notifications": func(imp *importer, mb *mosqBridge, l line) {
		mb.notifications, _ = imp.boolean(l)
	},
	"notifications_local_only": func(imp *importer, mb *mosqBridge, l line) {
		mb.localOnly, _ = imp.boolean(l)
	},
	"notification_topic": func(imp *importer, mb *mosqBridge, l line) { mb.notificationTopic, _ = imp.str(l) },
	"bridge_cafile": func(imp *importer, mb *mosqBridge, l line) {
		mb.c.TLS.CAFile, mb.tls = l.rest, true
		imp.str(l)
	},
	"bridge_certfile": func(imp *importer, mb *mosqBridge, l line) {
		mb.c.TLS.CertFile, mb.tls = l.rest, true
		imp.str(l)
	},
	"bridge_keyfile": func(imp *importer, mb *mosqBridge, l line) { mb.c.TLS.KeyFile, _ = imp.str(l) },
	"bridge_capath": func(imp *importer, mb *mosqBridge, l line) {
		mb.tls = true
		if strings.TrimSuffix(l.rest, "/") == "/etc/ssl/certs" {
			imp.note(l, "the system's CAs, which mqttd's bridge uses when tls.ca_file is not given")
			return
		}
		imp.named(l, differently+"the bridge takes one CA file (tls.ca_file), or the system's CAs without one: put the directory's certificates into one file")
	},
	"bridge_insecure": func(imp *importer, mb *mosqBridge, l line) {
		if v, ok := imp.boolean(l); ok && v {
			mb.c.TLS.Insecure = true
			imp.named(l, differently+"tls.insecure skips verifying the remote's certificate entirely, not only its host name; "+
				"tls.server_name can name the host the certificate is for instead")
		}
	},
	"bridge_alpn": func(imp *importer, mb *mosqBridge, l line) {
		if v, ok := imp.one(l); ok {
			mb.c.TLS.ALPN = []string{v}
		}
	},
	"bridge_tls_version": func(imp *importer, mb *mosqBridge, l line) {
		switch v, _ := imp.one(l); v {
		case "tlsv1.2":
			imp.add(l, notNeeded+"the bridge offers TLS 1.2 and 1.3", false)
		case "tlsv1.3", "tlsv1.1":
			imp.named(l, differently+"the bridge offers TLS 1.2 and 1.3, and the remote picks")
		case "":
		default:
			imp.bad(l, "%q: want tlsv1.3, tlsv1.2 or tlsv1.1", v)
		}
	},
	"bridge_session_expiry_interval": func(imp *importer, mb *mosqBridge, l line) {
		n, ok := imp.integer(l, 0, 0xFFFFFFFF)
		if ok && n == 0 {
			imp.named(l, differently+"session_expiry 0 means 1 hour; clean_start: true keeps no session")
		} else if ok {
			mb.c.SessionExpiry = time.Duration(n) * time.Second
		}
	},
	"start_type": func(imp *importer, mb *mosqBridge, l line) {
		switch v, _ := imp.one(l); v {
		case "automatic", "":
		case "lazy", "once":
			imp.named(l, lazyWhy)
		default:
			imp.bad(l, "%q: want automatic, lazy or once", v)
		}
	},
	"bridge_outgoing_retain": func(imp *importer, mb *mosqBridge, l line) {
		imp.onlyDefault(l, true, unsupported+": messages keep their retain flag on the remote")
	},
	"bridge_max_packet_size": func(imp *importer, mb *mosqBridge, l line) {
		if n, ok := imp.integer(l, -1<<31, 1<<31); ok && n > 0 {
			imp.named(l, unsupported+": the remote's Maximum Packet Size (5.0) is respected")
		}
	},
	"bridge_require_ocsp": func(imp *importer, mb *mosqBridge, l line) {
		imp.onlyDefault(l, false, unsupported+": OCSP")
	},
}

func init() {
	aliases := map[string]string{"clientid": "remote_clientid", "username": "remote_username", "password": "remote_password"}
	for k, v := range aliases {
		bridgeOptions[k] = bridgeOptions[v]
	}
	for k, why := range map[string]string{
		"idle_timeout":               notNeeded + "only for start_type lazy",
		"threshold":                  notNeeded + "only for start_type lazy",
		"local_clientid":             notNeeded + "the bridge runs inside mqttd and does not connect to it as a client",
		"local_username":             notNeeded + "the bridge runs inside mqttd and does not connect to it as a client",
		"local_password":             notNeeded + "the bridge runs inside mqttd and does not connect to it as a client",
		"local_cleansession":         notNeeded + "the bridge runs inside mqttd and has no local session",
		"bridge_receive_maximum":     unsupported + ": the bridge asks for the remote's default",
		"bridge_attempt_unsubscribe": unsupported,
		"bridge_bind_address":        unsupported + ": the system picks the local address",
		"bridge_identity":            pskWhy,
		"bridge_psk":                 pskWhy,
	} {
		bridgeOptions[k] = func(imp *importer, mb *mosqBridge, l line) {
			imp.add(l, why, !strings.HasPrefix(why, notNeeded))
		}
	}
}

// bridgeAddresses is `address host[:port] ...`, spaces or commas between.
func (imp *importer) bridgeAddresses(mb *mosqBridge, l line) {
	if len(mb.c.Addresses) > 0 {
		imp.bad(l, "a second address line in one bridge (Mosquitto refuses it)")
		return
	}
	for _, f := range l.args() {
		for _, a := range strings.Split(f, ",") {
			if a == "" {
				continue
			}
			hp, err := mosquittoAddress(a)
			if err != nil {
				imp.bad(l, "%v", err)
				return
			}
			mb.c.Addresses = append(mb.c.Addresses, hp)
		}
	}
	if len(mb.c.Addresses) == 0 {
		imp.bad(l, "no address")
	}
}

// mosquittoAddress is host[:port] (the port is 1883 when left out, and
// required after an IPv6 address) as host:port.
func mosquittoAddress(s string) (string, error) {
	host, port := s, "1883"
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i+1:]
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
		return "", fmt.Errorf("%q: want host[:port] (the port is required after an IPv6 address)", s)
	}
	return net.JoinHostPort(host, port), nil
}

// bridgeTopic is `topic PATTERN [out|in|both [QOS [LOCAL [REMOTE]]]]`, ""
// standing for an empty pattern or prefix. Mosquitto's defaults are out
// and QoS 0; the QoS is written out since mqttd's default is 1.
func (imp *importer) bridgeTopic(mb *mosqBridge, l line) {
	if len(l.fields) == 0 {
		imp.bad(l, "no pattern")
		return
	}
	r := bridge.Rule{Pattern: unquote(l.fields[0]), Direction: bridge.Out}
	a := line{fields: l.fields[1:]}.args()
	if len(a) > 4 {
		imp.bad(l, "want at most a pattern, a direction, a QoS and two prefixes")
		return
	}
	if len(a) > 0 {
		r.Direction = strings.ToLower(a[0])
		if r.Direction != bridge.Out && r.Direction != bridge.In && r.Direction != bridge.Both {
			imp.bad(l, "%q: want out, in or both", a[0])
			return
		}
	}
	qos := 0
	if len(a) > 1 {
		q, err := strconv.Atoi(a[1])
		if err != nil || q < 0 || q > 2 {
			imp.bad(l, "QoS %q: want 0, 1 or 2", a[1])
			return
		}
		qos = q
	}
	r.QoS = &qos
	if len(a) > 2 {
		r.LocalPrefix = unquote(a[2])
	}
	if len(a) > 3 {
		r.RemotePrefix = unquote(a[3])
	}
	probe := bridge.Config{Name: "probe", Addresses: []string{"localhost:1883"}, Topics: []bridge.Rule{r}}
	if errs := bridge.Validate([]bridge.Config{probe}); len(errs) > 0 {
		for _, err := range errs {
			imp.bad(l, "%s", strings.TrimPrefix(err.Error(), "bridges[0].topics[0]."))
		}
		return
	}
	mb.c.Topics = append(mb.c.Topics, r)
}

// unquote reads Mosquitto's "" marker for an empty pattern or prefix.
func unquote(s string) string {
	if s == `""` {
		return ""
	}
	return s
}

// restartTimeout is `restart_timeout CONSTANT` or `restart_timeout BASE CAP`.
func (imp *importer) restartTimeout(mb *mosqBridge, l line) {
	a := l.args()
	var secs []int
	for _, f := range a {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			imp.bad(l, "%q: want seconds", f)
			return
		}
		secs = append(secs, max(n, 1)) // Mosquitto's minimum
	}
	switch {
	case len(secs) == 1:
		mb.c.ReconnectMin = time.Duration(secs[0]) * time.Second
		mb.c.ReconnectMax = mb.c.ReconnectMin
	case len(secs) == 2 && secs[1] >= secs[0]:
		mb.c.ReconnectMin = time.Duration(secs[0]) * time.Second
		mb.c.ReconnectMax = time.Duration(secs[1]) * time.Second
	case len(secs) == 2:
		imp.bad(l, "the cap is lower than the base")
	default:
		imp.bad(l, "want one or two numbers of seconds")
	}
}

func (imp *importer) bridgeProtocol(mb *mosqBridge, l line) {
	switch v, _ := imp.one(l); v {
	case "mqttv311":
		mb.protocolSet = true
		mb.c.Protocol = "3.1.1"
	case "mqttv50":
		mb.protocolSet = true
	case "mqttv31":
		imp.named(l, unsupported+": MQTT 3.1 to a remote; protocol: \"3.1.1\" was written (5 is mqttd's default)")
	case "":
	default:
		imp.bad(l, "%q: want mqttv50, mqttv311 or mqttv31", v)
	}
}

// bridgeConfig is mb in mqttd's terms; ok is false when it cannot run
// (then it is named).
func (imp *importer) bridgeConfig(mb *mosqBridge) (bridge.Config, bool) {
	c := mb.c
	if len(c.Addresses) == 0 || len(c.Topics) == 0 {
		imp.named(mb.at, "left out: a bridge needs an address and a topic (Mosquitto refuses it without)")
		return c, false
	}
	if mb.tls {
		c.Addresses = nil
		for _, a := range mb.c.Addresses {
			c.Addresses = append(c.Addresses, "tls://"+a)
		}
	}
	if !mb.protocolSet {
		c.Protocol = "3.1.1" // Mosquitto's default
	}
	switch {
	case !mb.notifications:
		c.StateTopic = "-"
	default:
		c.StateTopic, c.StateNumeric = mb.notificationTopic, true
		if c.StateTopic == "" {
			id := c.ClientID
			if id == "" {
				host, _ := os.Hostname()
				id = host + "." + mb.at.fields[0]
				imp.note(mb.at, "state_topic: Mosquitto's notification topic holds the client id, made of this machine's host name ("+host+")")
			}
			c.StateTopic = "$SYS/broker/connection/" + id + "/state"
		}
		if !mb.localOnly {
			imp.named(mb.at, differently+"the bridge's state is published on this broker only; Mosquitto also publishes it on the remote "+
				"(notifications_local_only true says that is fine)")
		}
	}
	if errs := bridge.Validate([]bridge.Config{c}); len(errs) > 0 {
		imp.named(mb.at, fmt.Sprintf("left out: %v", errs))
		return c, false
	}
	return c, true
}
