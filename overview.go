package mqttd

import (
	"sync"
	"time"
)

// The overview: the broker at a glance, for an operator's first look
// (cmd/mqttd's /api/v1/overview, `mqttd ctl overview`).

// Overview is the broker at a glance, as Server.Overview reports it.
type Overview struct {
	// Version is Options.Version.
	Version string `json:"version"`
	// Started is when New made the broker.
	Started time.Time `json:"started"`
	// Node is this node's name in its cluster; "" when not clustered.
	Node        string `json:"node,omitempty"`
	Connections int64  `json:"connections"`
	// SessionsOnline and SessionsOffline are the sessions with and
	// without a connection.
	SessionsOnline  int64 `json:"sessions_online"`
	SessionsOffline int64 `json:"sessions_offline"`
	Subscriptions   int64 `json:"subscriptions"`
	Retained        int64 `json:"retained"`
	Queued          int64 `json:"queued"`
	// MessagesInPerSecond and MessagesOutPerSecond are the messages
	// received from and sent to clients a second, over the last
	// RateSeconds seconds (0 until the broker has served for a second).
	MessagesInPerSecond  float64 `json:"messages_in_per_second"`
	MessagesOutPerSecond float64 `json:"messages_out_per_second"`
	RateSeconds          float64 `json:"rate_seconds"`
	// HeapLive is the live heap in bytes (Stats.HeapLive).
	HeapLive int64 `json:"heap_live"`
	// Store is "ok", "none" when nothing is kept, or why commits fail.
	Store     string          `json:"store"`
	Listeners []ListenerState `json:"listeners"`
	Bridges   []BridgeState   `json:"bridges"`
	// DeadLetters counts the letters kept on $DLQ/, by reason.
	DeadLetters map[string]int `json:"dead_letters"`
}

// ListenerState is one listener, as Overview shows it.
type ListenerState struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// Path is the URL path of a ws or wss listener (the dashboard's watch
	// panel connects there).
	Path string `json:"path,omitempty"`
	// Error is why it stopped accepting connections, if it did.
	Error string `json:"error,omitempty"`
}

// Overview returns the broker at a glance.
func (s *Server) Overview() Overview {
	st := s.Stats()
	o := Overview{Version: s.opts.Version, Started: s.created.UTC(), Connections: st.Connections,
		SessionsOnline: st.SessionsOnline, SessionsOffline: st.Sessions - st.SessionsOnline,
		Subscriptions: st.Subscriptions, Retained: st.Retained, Queued: st.Queued, HeapLive: st.HeapLive,
		Store: "ok", Bridges: s.Bridges(), DeadLetters: s.DeadLettersKept()}
	o.MessagesInPerSecond, o.MessagesOutPerSecond, o.RateSeconds = s.memory.rates.perSecond()
	if c, ok := s.Cluster(); ok {
		o.Node = c.Node
	}
	switch f := s.storeHealth.failed.Load(); {
	case s.dur == nil:
		o.Store = "none"
	case f != nil:
		o.Store = f.err.Error()
	}
	s.mu.Lock()
	for _, ln := range s.listeners {
		l := ListenerState{Name: ln.name, Address: ln.l.Addr().String(), Path: ln.path}
		if ln.stopped != nil {
			l.Error = ln.stopped.Error()
		}
		o.Listeners = append(o.Listeners, l)
	}
	s.mu.Unlock()
	return o
}

// rateWindow is how many looks of the memory watch (a second apart) the
// rates are taken over.
const rateWindow = 5

// rateSamples are the message counters at the memory watch's last looks.
// Its lock is a leaf.
type rateSamples struct {
	mu   sync.Mutex
	ring [rateWindow + 1]rateSample
	n    int // looks taken
}

type rateSample struct {
	at      time.Time
	in, out uint64
}

// sample records the counters now.
func (r *rateSamples) sample(st *stats) {
	now := rateSample{time.Now(), st.messagesReceived.Load(), st.messagesSent.Load()}
	r.mu.Lock()
	r.ring[r.n%len(r.ring)] = now
	r.n++
	r.mu.Unlock()
}

// perSecond is the counters' rates between the oldest look kept and the
// latest, and the seconds between them.
func (r *rateSamples) perSecond() (in, out, seconds float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n < 2 {
		return 0, 0, 0
	}
	last := r.ring[(r.n-1)%len(r.ring)]
	first := r.ring[max(r.n-len(r.ring), 0)%len(r.ring)]
	seconds = last.at.Sub(first.at).Seconds()
	if seconds <= 0 {
		return 0, 0, 0
	}
	return float64(last.in-first.in) / seconds, float64(last.out-first.out) / seconds, seconds
}
