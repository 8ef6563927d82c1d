package main

import (
	"net/http"
	"strconv"

	"mqttd"
)

// The JSON API's reads (GET /api/v1/...): listings paged with ?after=
// and ?limit=, the overview, one client's detail.

// apiHandler serves the JSON API of srv.
type apiHandler struct {
	srv *mqttd.Server
	o   httpOptions
}

// routes adds the API's paths to mux, each behind g.
func (a *apiHandler) routes(mux *http.ServeMux, g *guard) {
	srv := a.srv
	mux.Handle("GET /api/v1/overview", g.wrap(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, srv.Overview())
	}))
	mux.Handle("GET /api/v1/clients", g.wrap(a.clients))
	mux.Handle("GET /api/v1/clients/{id}", g.wrap(a.client))
	mux.Handle("GET /api/v1/clients/{id}/subscriptions", g.wrap(a.subscriptions))
	mux.Handle("GET /api/v1/retained", g.wrap(a.retained))
	mux.Handle("GET /api/v1/topics", g.wrap(a.topics))
	mux.Handle("GET /api/v1/deadletters", g.wrap(a.deadLetters))
	mux.Handle("GET /api/v1/watch", g.wrap(a.watch))
	mux.Handle("GET /api/v1/bridges", g.wrap(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, struct {
			Bridges []mqttd.BridgeState `json:"bridges"`
		}{srv.Bridges()})
	}))
	mux.Handle("GET /api/v1/cluster", g.wrap(func(w http.ResponseWriter, _ *http.Request) {
		st, ok := srv.Cluster()
		if !ok {
			writeError(w, http.StatusNotFound, "this broker is not in a cluster (its configuration has no cluster block)")
			return
		}
		writeJSON(w, http.StatusOK, st)
	}))
	a.actions(mux, g)
}

// subscriptions pages one session's subscriptions.
func (a *apiHandler) subscriptions(w http.ResponseWriter, r *http.Request) {
	after, limit, ok := pageOf(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	page, next, found := a.srv.Subscriptions(id, after, limit)
	if !found {
		writeError(w, http.StatusNotFound, "no session with client id %q", id)
		return
	}
	if page == nil {
		page = []mqttd.SubscriptionState{}
	}
	writeJSON(w, http.StatusOK, struct {
		Subscriptions []mqttd.SubscriptionState `json:"subscriptions"`
		Next          string                    `json:"next,omitempty"`
	}{page, next})
}

// retained pages the retained messages, with ?payload=true the start of
// each payload.
func (a *apiHandler) retained(w http.ResponseWriter, r *http.Request) {
	after, limit, ok := pageOf(w, r)
	if !ok {
		return
	}
	payloadMax, ok := payloadParam(w, r)
	if !ok {
		return
	}
	page, next := a.srv.RetainedTopics(after, limit, payloadMax)
	writeJSON(w, http.StatusOK, struct {
		Retained []mqttd.RetainedState `json:"retained"`
		Next     string                `json:"next,omitempty"`
	}{page, next})
}

// clients lists sessions, every node's in a cluster: ?search=TEXT keeps
// those whose client id or username contains it, ?offline=true those
// without a connection.
func (a *apiHandler) clients(w http.ResponseWriter, r *http.Request) {
	after, limit, ok := pageOf(w, r)
	if !ok {
		return
	}
	f := mqttd.ClientFilter{Search: r.URL.Query().Get("search")}
	if f.Offline, ok = boolParam(w, r, "offline"); !ok {
		return
	}
	page, next := a.srv.ClusterClients(after, limit, f)
	writeJSON(w, http.StatusOK, struct {
		Clients []mqttd.ClientState `json:"clients"`
		Next    string              `json:"next,omitempty"`
	}{page, next})
}

// client is one session with its first page of subscriptions.
func (a *apiHandler) client(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, found := a.srv.Client(id)
	subs, next, found2 := a.srv.Subscriptions(id, "", maxPage)
	if !found || !found2 {
		writeError(w, http.StatusNotFound, "no session with client id %q", id)
		return
	}
	if subs == nil {
		subs = []mqttd.SubscriptionState{}
	}
	writeJSON(w, http.StatusOK, struct {
		Client        mqttd.ClientState         `json:"client"`
		Subscriptions []mqttd.SubscriptionState `json:"subscriptions"`
		Next          string                    `json:"next,omitempty"`
	}{st, subs, next})
}

// deadLetters lists the letters kept on $DLQ/, with ?payload=true the
// start of each payload.
func (a *apiHandler) deadLetters(w http.ResponseWriter, r *http.Request) {
	after, limit, ok := pageOf(w, r)
	if !ok {
		return
	}
	payloadMax, ok := payloadParam(w, r)
	if !ok {
		return
	}
	page, next := a.srv.DeadLetters(after, limit, payloadMax)
	writeJSON(w, http.StatusOK, struct {
		DeadLetters []mqttd.DeadLetterState `json:"dead_letters"`
		Next        string                  `json:"next,omitempty"`
	}{page, next})
}

// topics lists the busiest topics, ?limit=N of them (at most
// mqttd.MaxCountedTopics). Reading it switches counting on for a minute
// (mqttd.Server.TopicCounts).
func (a *apiHandler) topics(w http.ResponseWriter, r *http.Request) {
	limit := defaultPage
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "limit: want a number from 1 to %d, got %q", mqttd.MaxCountedTopics, v)
			return
		}
		limit = min(n, mqttd.MaxCountedTopics)
	}
	writeJSON(w, http.StatusOK, a.srv.TopicCounts(limit))
}

// boolParam reads ?name=true|false (false when absent), answering a bad
// value itself.
func boolParam(w http.ResponseWriter, r *http.Request, name string) (v, ok bool) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return false, true
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%s: want true or false, got %q", name, s)
		return false, false
	}
	return v, true
}

// payloadParam reads ?payload=true: how much of each payload to show.
func payloadParam(w http.ResponseWriter, r *http.Request) (payloadMax int, ok bool) {
	with, ok := boolParam(w, r, "payload")
	if with {
		payloadMax = retainedPayloadMax
	}
	return payloadMax, ok
}
