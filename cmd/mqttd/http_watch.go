package main

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"mqttd"
)

// GET /api/v1/watch?filter=F streams the messages matching F as they are
// routed, one JSON object a line, with what a subscriber does not see:
// the publisher's client id. It is an inline subscription of the broker
// (Server.Subscribe), so it costs what a subscriber costs; at most
// maxWatches run at once, and a watcher that reads slowly loses messages
// (counted in a line of their own) rather than holding the publishers up.

const (
	// maxWatches bounds the watches open at once.
	maxWatches = 8
	// watchBuffer is how many messages wait for a slow watcher.
	watchBuffer = 1024
	// watchWriteWait bounds each write of a watch: the server's write
	// timeout would end the stream after two minutes.
	watchWriteWait = 30 * time.Second
)

// watchLine is one line of a watch.
type watchLine struct {
	Topic         string `json:"topic,omitempty"`
	QoS           byte   `json:"qos"`
	Retain        bool   `json:"retain,omitempty"` // set by its publisher, or retained and sent as the watch starts
	From          string `json:"from,omitempty"`
	Time          string `json:"time,omitempty"`
	Payload       string `json:"payload,omitempty"`
	PayloadBase64 []byte `json:"payload_base64,omitempty"`
	// Dropped, on a line of its own, counts the messages lost since the
	// last line because the watcher read too slowly.
	Dropped uint64 `json:"dropped,omitempty"`
}

// watches counts the watches open, across handlers.
var watches atomic.Int32

func (a *apiHandler) watch(w http.ResponseWriter, r *http.Request) {
	filter := r.URL.Query().Get("filter")
	if filter == "" {
		writeError(w, http.StatusBadRequest, "?filter= is required (a topic filter, e.g. sensors/#)")
		return
	}
	if watches.Add(1) > maxWatches {
		watches.Add(-1)
		writeError(w, http.StatusTooManyRequests, "%d watches are open already", maxWatches)
		return
	}
	defer watches.Add(-1)
	lines := make(chan watchLine, watchBuffer)
	var dropped atomic.Uint64
	unsubscribe, err := a.srv.Subscribe(filter, func(m mqttd.Message) {
		l := watchLine{Topic: m.Topic, QoS: m.QoS, Retain: m.Retain || m.PublishedRetain, From: m.From,
			Time: time.Now().UTC().Format(time.RFC3339Nano)}
		if utf8.Valid(m.Payload) {
			l.Payload = string(m.Payload)
		} else {
			l.PayloadBase64 = append([]byte(nil), m.Payload...)
		}
		select {
		case lines <- l:
		default:
			dropped.Add(1)
		}
	})
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	defer unsubscribe()
	a.o.log.Info().Str("filter", filter).Str("remote", r.RemoteAddr).Msg("API: watching")
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	send := func(l watchLine) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(watchWriteWait))
		return enc.Encode(l) == nil && rc.Flush() == nil
	}
	if !send(watchLine{}) { // the headers and a first line, so that the watcher knows it is on
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-a.o.stopping:
			return
		case l := <-lines:
			if n := dropped.Swap(0); n > 0 && !send(watchLine{Dropped: n}) {
				return
			}
			if !send(l) {
				return
			}
		}
	}
}
