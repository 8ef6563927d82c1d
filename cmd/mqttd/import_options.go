package main

import (
	"strconv"
	"strings"
	"time"
)

// importer turns the options of a Mosquitto configuration, in file order,
// into an mqttd config, remembering what it could not translate.
type importer struct {
	cfg      config
	findings []finding
	sources  []string // the files read, the main one first

	perListener  bool
	securitySeen bool // per_listener_settings must come before these
	global       authOpts
	// def is the default listener: port, bind_address and the listener
	// options given before any listener line.
	def       *mosqListener
	listeners []*mosqListener
	cur       *mosqListener // the last listener line's; nil before any
	networked bool          // a listener, port or bind_address line: not local-only
	bridges   []*mosqBridge
	br        *mosqBridge // the last connection line's

	logTypes    map[string]bool
	logTypeLine *line
	packetSize  bool  // max_packet_size was given
	messageSize int64 // message_size_limit
	sizeLine    line
}

func newImporter() *importer { return &importer{} }

// authOpts are Mosquitto's security options, global or a listener's.
type authOpts struct {
	passwordFile, aclFile string
	anon                  *bool
}

// option translates one line.
func (imp *importer) option(l line) {
	if h, ok := bridgeOptions[l.key]; ok {
		if imp.br == nil {
			imp.bad(l, "a bridge option before any connection line")
			return
		}
		h(imp, imp.br, l)
		return
	}
	if h, ok := listenerOptions[l.key]; ok {
		h(imp, imp.listener(l), l)
		return
	}
	if h, ok := globalOptions[l.key]; ok {
		h(imp, l)
		return
	}
	if why, ok := leftOutOptions[l.key]; ok {
		imp.named(l, why)
		return
	}
	if why, ok := notNeededOptions[l.key]; ok {
		imp.add(l, notNeeded+why, false)
		return
	}
	for _, p := range []string{"auth_opt_", "plugin_opt_", "global_plugin_opt_"} {
		if strings.HasPrefix(l.key, p) {
			imp.named(l, unsupported+": an option of a plugin, and mqttd loads no plugins")
			return
		}
	}
	imp.named(l, "unknown option: not one of Mosquitto 2.0's")
}

// listener is the listener the options of l go to.
func (imp *importer) listener(l line) *mosqListener {
	if imp.cur != nil {
		return imp.cur
	}
	if imp.def == nil {
		imp.def = &mosqListener{at: l, port: 1883}
	}
	return imp.def
}

// security is where a security option goes: the current listener's with
// per_listener_settings true, else the broker's.
func (imp *importer) security(l line) *authOpts {
	imp.securitySeen = true
	if imp.perListener {
		return &imp.listener(l).auth
	}
	return &imp.global
}

const (
	pluginsWhy = unsupported + ": mqttd loads no plugins; a Go program embedding mqttd sets Options.Authenticator and Options.Authorizer instead"
	pskWhy     = unsupported + ": TLS-PSK (pre-shared keys); use certificates"
)

// globalOptions are the options of the broker as a whole.
var globalOptions = map[string]func(*importer, line){
	"per_listener_settings": func(imp *importer, l line) {
		v, ok := imp.boolean(l)
		if ok && v && imp.securitySeen {
			imp.bad(l, "per_listener_settings must come before every security option (Mosquitto refuses it here)")
			return
		}
		imp.perListener = ok && v
	},
	"password_file": func(imp *importer, l line) {
		if v, ok := imp.str(l); ok {
			imp.security(l).passwordFile = v
		}
	},
	"acl_file": func(imp *importer, l line) {
		if v, ok := imp.str(l); ok {
			imp.security(l).aclFile = v
		}
	},
	"allow_anonymous": func(imp *importer, l line) {
		if v, ok := imp.boolean(l); ok {
			imp.security(l).anon = &v
		}
	},
	"allow_zero_length_clientid": func(imp *importer, l line) {
		imp.security(l)
		imp.onlyDefault(l, true, unsupported+": a client sending an empty client id is given one")
	},
	"auto_id_prefix": func(imp *importer, l line) {
		imp.security(l)
		imp.named(l, differently+"the ids mqttd gives clients that send none have a form of its own")
	},
	"psk_file":    func(imp *importer, l line) { imp.security(l); imp.named(l, pskWhy) },
	"auth_plugin": func(imp *importer, l line) { imp.security(l); imp.named(l, pluginsWhy) },
	"plugin":      func(imp *importer, l line) { imp.security(l); imp.named(l, pluginsWhy) },
	"clientid_prefixes": func(imp *importer, l line) {
		v, ok := imp.str(l)
		if ok && strings.Contains(v, "%u") {
			imp.named(l, differently+"%u in auth.client_id_prefix stands for the username")
		} else if ok {
			imp.cfg.Auth.ClientIDPrefix = v
		}
	},
	"persistence":          (*importer).persistenceOption,
	"retained_persistence": (*importer).persistenceOption,
	"persistence_location": func(imp *importer, l line) {
		if v, ok := imp.str(l); ok {
			imp.cfg.DataDir = v
			imp.note(l, "data_dir: mqttd keeps its own store, mqttd.db, there (it must be writable by the user mqttd runs as); "+
				"Mosquitto's mosquitto.db is not read, so its retained messages and sessions do not carry over")
		}
	},
	"persistence_file": func(imp *importer, l line) {
		imp.add(l, notNeeded+"mqttd's store is always mqttd.db in data_dir", false)
	},
	"max_inflight_messages": func(imp *importer, l line) {
		if n, ok := imp.integer(l, 0, 65535); ok && n == 0 {
			imp.named(l, differently+"every window is bounded: limits.max_inflight (default 100)")
		} else if ok {
			imp.cfg.Limits.MaxInflight = int(n)
		}
	},
	"max_inflight_bytes": func(imp *importer, l line) {
		if n, ok := imp.integer(l, -1<<31, 1<<31); ok && n > 0 {
			imp.named(l, unsupported+": the window is counted in messages only (limits.max_inflight)")
		}
	},
	"max_queued_messages": (*importer).maxQueuedMessages,
	"max_queued_bytes": func(imp *importer, l line) {
		if n, ok := imp.integer(l, -1<<31, 1<<62); ok && n <= 0 {
			imp.named(l, differently+"every queue is bounded: limits.max_queued_bytes (default 16 MiB)")
		} else if ok {
			imp.cfg.Limits.MaxQueuedBytes = n
		}
	},
	"queue_qos0_messages": func(imp *importer, l line) {
		if v, ok := imp.boolean(l); ok {
			imp.cfg.Limits.QueueQoS0 = v
		}
	},
	"max_packet_size": func(imp *importer, l line) {
		if n, ok := imp.integer(l, 20, maxPacket); ok {
			imp.cfg.Limits.MaxPacketSize = int(n)
			imp.packetSize = true
		}
	},
	"message_size_limit": func(imp *importer, l line) {
		if n, ok := imp.integer(l, 0, maxPacket); ok {
			imp.messageSize, imp.sizeLine = n, l
		}
	},
	"max_keepalive": func(imp *importer, l line) {
		if n, ok := imp.integer(l, 10, 65535); ok {
			imp.cfg.Limits.MaxKeepAlive = int(n)
		}
	},
	"memory_limit": func(imp *importer, l line) {
		if n, ok := imp.integer(l, 0, 1<<62); ok && n > 0 {
			imp.cfg.Limits.MaxMemory = n
			imp.note(l, "limits.max_memory: mqttd refuses no allocation past it; from 7/8 of it it sheds load "+
				"(new connections, new retained messages, QoS 0 for slow readers) before anything acknowledged")
		}
	},
	"persistent_client_expiration": func(imp *importer, l line) {
		if d, ok := imp.expiration(l); ok {
			imp.cfg.Limits.PersistentSessionExpiry = d
		}
	},
	"sys_interval": func(imp *importer, l line) {
		n, ok := imp.integer(l, 0, 65535)
		switch {
		case ok && n == 0:
			imp.cfg.SysInterval = -time.Second
		case ok && n != 10:
			imp.cfg.SysInterval = time.Duration(n) * time.Second
		}
	},
	"retain_available": func(imp *importer, l line) {
		imp.onlyDefault(l, true, unsupported+": retained messages are always available (limits.max_retained bounds them)")
	},
	"upgrade_outgoing_qos": func(imp *importer, l line) {
		imp.onlyDefault(l, false, unsupported+": messages go at the lower of their QoS and the subscription's, as MQTT asks")
	},
	"connection_messages": func(imp *importer, l line) {
		imp.onlyDefault(l, true, differently+"it logs each connection at info; log.level: warn hides them with the other info lines")
	},
	"check_retain_source": func(imp *importer, l line) {
		imp.onlyDefault(l, false, differently+"the ACL is asked whether the subscriber may read each retained message, not whether its publisher may still write it")
	},
	"set_tcp_nodelay": func(imp *importer, l line) {
		imp.add(l, notNeeded+"Go sets TCP_NODELAY on every connection", false)
	},
	"log_timestamp": func(imp *importer, l line) {
		imp.onlyDefault(l, true, differently+"its log lines always carry the time")
	},
	"log_dest":     (*importer).logDest,
	"log_type":     (*importer).logType,
	"listener":     (*importer).newListener,
	"port":         (*importer).port,
	"bind_address": (*importer).bindAddress,
	"connection":   (*importer).newBridge,
}

// maxPacket is the largest packet MQTT allows.
const maxPacket = 268435455

// leftOutOptions have no mqttd equivalent, whatever their value.
var leftOutOptions = map[string]string{
	"global_plugin":                  pluginsWhy,
	"auth_plugin_deny_special_chars": unsupported + ": an option of auth_plugin, and mqttd loads no plugins",
	"retain_expiry_interval":         unsupported + ": retained messages expire only by their 5.0 Message Expiry Interval",
	"log_facility":                   differently + "it logs to standard error (under systemd the journal keeps it), not to syslog",
	"log_timestamp_format":           differently + "its times are RFC 3339 (log.format: json) or hh:mm:ss.mmm (console)",
	"websockets_log_level":           unsupported + ": mqttd's WebSocket listeners log with the rest at log.level",
	"pid_file":                       unsupported + ": mqttd writes no pid file; systemd (or your supervisor) tracks the process",
	"user":                           differently + "it does not switch users: start it as the user it should run as (the package's unit has User=mqttd)",
}

// notNeededOptions are done without in mqttd; they leave nothing out.
var notNeededOptions = map[string]string{
	"autosave_interval":        "mqttd commits each message a session or a retained topic keeps before it acknowledges it (durability: sync)",
	"autosave_on_changes":      "mqttd commits each message a session or a retained topic keeps before it acknowledges it (durability: sync)",
	"allow_duplicate_messages": "deprecated in Mosquitto; mqttd follows MQTT's rules for overlapping subscriptions",
	"retry_interval":           "gone from Mosquitto 2 as well: unacknowledged messages are sent again when the client reconnects",
	"websockets_headers_size":  "Go's HTTP server reads headers of up to 1 MB",
}

func (imp *importer) persistenceOption(l line) {
	if v, ok := imp.boolean(l); ok && !v {
		imp.named(l, differently+"it always keeps sessions, their queued messages and retained messages in data_dir "+
			"(durability: none never fsyncs, for throwaway state)")
	}
}

func (imp *importer) maxQueuedMessages(l line) {
	n, ok := imp.integer(l, -1<<31, 1<<31)
	switch {
	case !ok:
	case imp.br != nil:
		if n <= 0 {
			imp.named(l, differently+"a bridge's queue is always bounded: max_queued_messages (default 100,000)")
			return
		}
		// Mosquitto 2.0 reads it as the broker's, wherever it stands,
		// which bounds its bridges' queues too.
		imp.br.c.MaxQueuedMessages = int(n)
		imp.cfg.Limits.MaxQueued = int(n)
		imp.note(l, "after a connection line: the bridge's max_queued_messages, and limits.max_queued for the clients as Mosquitto 2.0 reads it")
	case n <= 0:
		imp.named(l, differently+"every queue is bounded: limits.max_queued (default 100,000)")
	default:
		imp.cfg.Limits.MaxQueued = int(n)
	}
}

// expiration reads persistent_client_expiration: a number and h, d, w, m
// (30 days) or y (365 days).
func (imp *importer) expiration(l line) (time.Duration, bool) {
	s, ok := imp.one(l)
	if !ok {
		return 0, false
	}
	units := map[byte]time.Duration{'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour,
		'm': 30 * 24 * time.Hour, 'y': 365 * 24 * time.Hour}
	unit, known := units[s[len(s)-1]]
	n, err := strconv.Atoi(s[:len(s)-1])
	if !known || err != nil || n <= 0 || n > 100*365*24 {
		imp.bad(l, "%q: want a number and h, d, w, m or y, like 14d", s)
		return 0, false
	}
	return time.Duration(n) * unit, true
}

func (imp *importer) logDest(l line) {
	dest, ok := imp.first(l)
	if !ok {
		return
	}
	switch dest {
	case "stderr":
	case "stdout":
		imp.note(l, "mqttd logs to standard error")
	case "file", "syslog":
		imp.named(l, differently+"it logs to standard error: under systemd the journal keeps it (journalctl -u mqttd)")
	case "none":
		imp.named(l, differently+"it always logs; log.level: error logs least")
	case "topic", "dlt":
		imp.named(l, unsupported+": mqttd logs to standard error only")
	default:
		imp.bad(l, "%q: want stdout, stderr, syslog, topic, file, dlt or none", dest)
	}
}

// first returns the first value of an option that may have more.
func (imp *importer) first(l line) (string, bool) {
	a := l.args()
	if len(a) == 0 {
		imp.bad(l, "no value")
		return "", false
	}
	return a[0], true
}

// logType collects the types; finishLog maps them to a level.
func (imp *importer) logType(l line) {
	t, ok := imp.first(l)
	if !ok {
		return
	}
	if imp.logTypes == nil {
		imp.logTypes = map[string]bool{}
	}
	switch t {
	case "none":
		clear(imp.logTypes)
	case "debug", "error", "warning", "notice", "information", "all":
		imp.logTypes[t] = true
	case "subscribe", "unsubscribe", "websockets", "internal":
		imp.named(l, unsupported+": mqttd logs no line per subscription or WebSocket frame")
	default:
		imp.bad(l, "%q: want debug, error, warning, notice, information, subscribe, unsubscribe, websockets, none or all", t)
		return
	}
	imp.logTypeLine = &l
}

// finishLog sets log.level to the most verbose log_type given.
func (imp *importer) finishLog() {
	if imp.logTypeLine == nil {
		return
	}
	t := imp.logTypes
	switch {
	case t["debug"] || t["all"]:
		imp.cfg.Log.Level = "debug"
	case t["information"] || t["notice"]:
	case t["warning"]:
		imp.cfg.Log.Level = "warn"
	case t["error"]:
		imp.cfg.Log.Level = "error"
	default:
		imp.cfg.Log.Level = "error"
		imp.named(*imp.logTypeLine, differently+"it always logs errors (log.level: error)")
	}
}

// finishSizes sets limits.max_packet_size from max_packet_size or, failing
// it, message_size_limit, and says what the defaults change.
func (imp *importer) finishSizes(main string) {
	l := imp.sizeLine
	switch {
	case imp.packetSize && imp.messageSize > 0:
		imp.named(l, differently+"it bounds whole packets only: limits.max_packet_size, from max_packet_size")
	case imp.messageSize > 0:
		// Room for the longest topic and the properties, so that every
		// message Mosquitto took passes.
		imp.cfg.Limits.MaxPacketSize = int(min(imp.messageSize+128<<10, maxPacket))
		imp.named(l, differently+"limits.max_packet_size bounds the whole packet (set to this plus 128 KiB for the topic and properties), "+
			"and a client sending a larger one is disconnected, where Mosquitto drops the message")
	case !imp.packetSize:
		imp.note(line{file: main, key: "max_packet_size"}, "Mosquitto accepts packets of any size by default; mqttd up to limits.max_packet_size, "+
			"by default limits.max_incoming_bytes_total (4 to 16 MiB at the default memory budgets)")
	}
	if imp.cfg.Limits.PersistentSessionExpiry == 0 {
		imp.note(line{file: main, key: "persistent_client_expiration"},
			"Mosquitto keeps a 3.1.1 persistent session forever by default; mqttd 24 hours (limits.persistent_session_expiry)")
	}
}
