package main

import (
	"net"
	"net/netip"
	"strconv"

	"mqttd"
)

// mosqListener is one of Mosquitto's listeners.
type mosqListener struct {
	at         line // the listener line, or the default listener's first option
	port       int
	host, path string // path: a unix socket's (port 0)
	websockets bool
	domain     string // socket_domain

	certFile, keyFile, caFile, crlFile string
	requireCert, identity              bool
	identityAt                         line // the use_identity_as_username line
	minVersion                         string
	maxConns                           int
	auth                               authOpts
}

const tlsOnlyWhy = "ignored, as Mosquitto does: the listener has no certfile and keyfile"

// listenerOptions are the options of the current listener.
var listenerOptions = map[string]func(*importer, *mosqListener, line){
	"protocol": func(imp *importer, ml *mosqListener, l line) {
		switch v, _ := imp.one(l); v {
		case "mqtt":
			ml.websockets = false
		case "websockets":
			ml.websockets = true
		case "":
		default:
			imp.bad(l, "%q: want mqtt or websockets", v)
		}
	},
	"certfile": func(imp *importer, ml *mosqListener, l line) { ml.certFile, _ = imp.str(l) },
	"keyfile":  func(imp *importer, ml *mosqListener, l line) { ml.keyFile, _ = imp.str(l) },
	"cafile":   func(imp *importer, ml *mosqListener, l line) { ml.caFile, _ = imp.str(l) },
	"crlfile":  func(imp *importer, ml *mosqListener, l line) { ml.crlFile, _ = imp.str(l) },
	"capath": func(imp *importer, ml *mosqListener, l line) {
		imp.named(l, differently+"it takes one CA file (client_ca_file): put the directory's certificates into one")
	},
	"require_certificate": func(imp *importer, ml *mosqListener, l line) { ml.requireCert, _ = imp.boolean(l) },
	"use_identity_as_username": func(imp *importer, ml *mosqListener, l line) {
		ml.identity, _ = imp.boolean(l)
		ml.identityAt = l
	},
	"use_subject_as_username": func(imp *importer, ml *mosqListener, l line) {
		imp.onlyDefault(l, false, unsupported+": use_identity_as_username (the common name) is")
	},
	"use_username_as_clientid": func(imp *importer, ml *mosqListener, l line) {
		imp.onlyDefault(l, false, unsupported+`; auth.client_id_prefix: "%u:" ties client ids to usernames instead`)
	},
	"tls_version": func(imp *importer, ml *mosqListener, l line) {
		switch v, _ := imp.one(l); v {
		case "tlsv1.3":
			ml.minVersion = "1.3"
		case "tlsv1.2", "":
		case "tlsv1.1", "tlsv1":
			imp.named(l, differently+"it accepts TLS 1.2 and later only")
		default:
			imp.bad(l, "%q: want tlsv1.3, tlsv1.2 or tlsv1.1", v)
		}
	},
	"ciphers": func(imp *importer, ml *mosqListener, l line) {
		imp.named(l, differently+"cipher_suites takes Go's names (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256), not OpenSSL's; Go's defaults apply")
	},
	"ciphers_tls1.3": func(imp *importer, ml *mosqListener, l line) {
		imp.named(l, unsupported+": TLS 1.3's cipher suites are Go's")
	},
	"socket_domain": func(imp *importer, ml *mosqListener, l line) {
		switch v, _ := imp.one(l); v {
		case "ipv4", "ipv6":
			ml.domain = v
		case "":
		default:
			imp.bad(l, "%q: want ipv4 or ipv6", v)
		}
	},
	"max_connections": func(imp *importer, ml *mosqListener, l line) {
		if n, ok := imp.integer(l, -1<<31, 1<<31); ok && n > 0 {
			ml.maxConns = int(n)
		}
	},
	"max_topic_alias": func(imp *importer, ml *mosqListener, l line) {
		n, ok := imp.integer(l, 0, 65535)
		switch {
		case !ok:
		case n == 0:
			imp.named(l, differently+"topic aliases cannot be turned off: limits.max_topic_alias (default 10)")
		case imp.cfg.Limits.MaxTopicAlias != 0 && imp.cfg.Limits.MaxTopicAlias != int(n):
			imp.named(l, differently+"limits.max_topic_alias is one for every listener; the first listener's was kept")
		default:
			imp.cfg.Limits.MaxTopicAlias = int(n)
		}
	},
	"max_qos": func(imp *importer, ml *mosqListener, l line) {
		if n, ok := imp.integer(l, 0, 2); ok && n != 2 {
			imp.named(l, unsupported+": every listener takes QoS 0, 1 and 2")
		}
	},
	"bind_interface": func(imp *importer, ml *mosqListener, l line) {
		imp.named(l, unsupported+": give the interface's address in the listener line instead")
	},
	"mount_point": func(imp *importer, ml *mosqListener, l line) {
		imp.named(l, unsupported+": clients of every listener share one topic tree")
	},
	"http_dir": func(imp *importer, ml *mosqListener, l line) {
		imp.named(l, unsupported+": mqttd serves no files over its WebSocket listeners")
	},
	"psk_hint": func(imp *importer, ml *mosqListener, l line) { imp.named(l, pskWhy) },
	"dhparamfile": func(imp *importer, ml *mosqListener, l line) {
		imp.add(l, notNeeded+"Go's TLS uses ECDHE key exchange, which needs no DH parameters", false)
	},
}

func init() {
	for _, k := range []string{"tls_engine", "tls_engine_kpass_sha1", "tls_keyform"} {
		listenerOptions[k] = func(imp *importer, ml *mosqListener, l line) {
			imp.named(l, unsupported+": OpenSSL engines; the key must be in keyfile")
		}
	}
	listenerOptions["maximum_qos"] = listenerOptions["max_qos"]
}

// port is the default listener's port (deprecated in Mosquitto).
func (imp *importer) port(l line) {
	if n, ok := imp.integer(l, 1, 65535); ok {
		imp.defaultListener(l).port = int(n)
	}
}

// bindAddress is the default listener's address (deprecated in Mosquitto).
func (imp *importer) bindAddress(l line) {
	if v, ok := imp.one(l); ok {
		imp.defaultListener(l).host = v
	}
}

// defaultListener is the listener of port and bind_address, which
// Mosquitto opens besides those of listener lines.
func (imp *importer) defaultListener(l line) *mosqListener {
	imp.networked = true
	if imp.def == nil {
		imp.def = &mosqListener{at: l, port: 1883}
	}
	return imp.def
}

// newListener is `listener PORT [ADDRESS]`, or `listener 0 PATH` for a
// unix socket.
func (imp *importer) newListener(l line) {
	a := l.args()
	if len(a) < 1 || len(a) > 2 {
		imp.bad(l, "want a port and perhaps an address")
		return
	}
	port, err := strconv.Atoi(a[0])
	if err != nil || port < 0 || port > 65535 {
		imp.bad(l, "%q: want a port from 0 to 65535", a[0])
		return
	}
	imp.networked = true
	ml := &mosqListener{at: l, port: port}
	switch {
	case port == 0 && len(a) == 1:
		imp.bad(l, "a listener with port 0 needs a unix socket path")
		return
	case port == 0:
		ml.path = a[1]
	case len(a) == 2:
		ml.host = a[1]
	}
	imp.listeners = append(imp.listeners, ml)
	imp.cur = ml
}

// listenerConfig is ml in mqttd's terms; ok is false when it cannot be
// opened as Mosquitto would (then it is named).
func (imp *importer) listenerConfig(ml *mosqListener) (mqttd.ListenerConfig, bool) {
	lc := mqttd.ListenerConfig{Type: "tcp", MaxConnections: ml.maxConns}
	secure := ml.certFile != "" && ml.keyFile != ""
	if (ml.certFile != "") != (ml.keyFile != "") {
		imp.named(ml.at, "left out: certfile and keyfile go together (Mosquitto refuses one without the other)")
		return lc, false
	}
	switch {
	case ml.path != "":
		lc.Type, lc.Path = "unix", ml.path
		if secure || ml.websockets {
			imp.named(ml.at, unsupported+": a unix socket listener carries plain MQTT only; left out")
			return lc, false
		}
	case ml.websockets && secure:
		lc.Type = "wss"
	case ml.websockets:
		lc.Type = "ws"
	case secure:
		lc.Type = "tls"
	}
	if lc.Type != "unix" {
		lc.Address = imp.address(ml)
	}
	if ml.websockets {
		imp.note(ml.at, "MQTT over WebSocket is served at the path /mqtt only (Mosquitto takes any path), "+
			"and browser pages from another host need allowed_origins")
	}
	switch {
	case secure:
		if !imp.tlsListener(ml, &lc) {
			return lc, false
		}
	case ml.caFile != "" || ml.crlFile != "" || ml.requireCert || ml.minVersion != "":
		imp.note(ml.at, "cafile, crlfile, require_certificate or tls_version "+tlsOnlyWhy)
	}
	if imp.perListener {
		a := ml.auth.config(imp.networked)
		lc.Auth = &a
	}
	// Whether anyone may log in depends on the whole translation's auth
	// (finishClosed).
	probe := mqttd.Options{Listeners: []mqttd.ListenerConfig{lc}, Auth: mqttd.Auth{AuthConfig: mqttd.AuthConfig{AllowClosed: true}}}
	if err := probe.Validate(); err != nil {
		imp.named(ml.at, "left out: "+err.Error())
		return lc, false
	}
	return lc, true
}

// tlsListener sets the TLS keys of a listener with certfile and keyfile;
// it reports false, naming why, when mqttd would let in clients Mosquitto
// refuses.
func (imp *importer) tlsListener(ml *mosqListener, lc *mqttd.ListenerConfig) bool {
	lc.CertFile, lc.KeyFile, lc.ClientCAFile, lc.MinVersion = ml.certFile, ml.keyFile, ml.caFile, ml.minVersion
	lc.RequireClientCert, lc.UseIdentityAsUsername = ml.requireCert, ml.identity
	switch {
	case ml.requireCert && ml.caFile == "":
		imp.named(ml.at, "left out: require_certificate needs the CAs in cafile (mqttd reads no capath)")
		return false
	case ml.identity && !ml.requireCert:
		imp.named(ml.identityAt, "left out with its listener: mqttd takes use_identity_as_username only with require_certificate true")
		return false
	}
	if ml.crlFile != "" && ml.caFile == "" {
		imp.named(ml.at, "crlfile: mqttd needs the CA that signed it in cafile; left out")
	} else {
		lc.CRLFile = ml.crlFile
	}
	return true
}

// address is host:port; no host is every address, both IP versions
// unless socket_domain says one, or loopback only when the file has no
// listener, port or bind_address line (Mosquitto's local-only mode).
func (imp *importer) address(ml *mosqListener) string {
	host := ml.host
	switch {
	case host != "":
		if _, err := netip.ParseAddr(host); err != nil && ml.domain != "" {
			imp.named(ml.at, "socket_domain: "+differently+"it listens on the first address the name resolves to; give an IP address")
		}
	case !imp.networked:
		host = "127.0.0.1"
	case ml.domain == "ipv4":
		host = "0.0.0.0"
	case ml.domain == "ipv6":
		host = "::"
	}
	return net.JoinHostPort(host, strconv.Itoa(ml.port))
}

// config is the auth block for these options: Mosquitto 2 refuses
// anonymous clients unless allow_anonymous says otherwise, except in its
// local-only mode (networked false), where it lets them in.
func (a authOpts) config(networked bool) mqttd.AuthConfig {
	c := mqttd.AuthConfig{PasswordFile: a.passwordFile, ACLFile: a.aclFile, AllowAnonymous: a.anon}
	switch {
	case a.anon != nil:
	case networked:
		c.AllowAnonymous = new(false)
	case a.passwordFile != "":
		c.AllowAnonymous = new(true)
	}
	return c
}
