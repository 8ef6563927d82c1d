package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/cluster"
)

// The JSON API's actions (POST, PUT, DELETE under /api/v1/): they change
// what the broker holds, so besides what a read needs (guard.wrap) each
// must not be something a web page can make a visitor's browser send
// (CSRF). With the token, the Authorization header is that proof: a page
// on another site cannot add it without the API answering a CORS
// preflight, which it never does. Otherwise (on loopback without
// credentials, or with an admin's password, which a browser sends by
// itself once given) the request must carry actionHeader, which likewise
// needs a preflight, and an Origin header, when sent, must name the host
// the request was sent to. Every action taken is logged at info with who
// took it: the admin's username, "token" or "loopback".

// actionHeader is the header an action carries when no token is set.
const actionHeader = "X-Mqttd-Action"

// maxActionBody bounds what an action reads of a request's body.
const maxActionBody = 1 << 10

// actions adds the API's actions to mux.
func (a *apiHandler) actions(mux *http.ServeMux, g *guard) {
	srv := a.srv
	mux.Handle("POST /api/v1/clients/{id}/disconnect", g.action(func(r *http.Request) (string, error) {
		id := r.PathValue("id")
		discard := false
		switch v := r.URL.Query().Get("session"); v {
		case "", "keep":
		case "discard":
			discard = true
		default:
			return "", badInput("session: want keep or discard, got %q", v)
		}
		if err := srv.Disconnect(id, discard); err != nil {
			return "", err
		}
		if discard {
			return fmt.Sprintf("disconnected client %q and discarded its session", id), nil
		}
		return fmt.Sprintf("disconnected client %q", id), nil
	}))
	mux.Handle("DELETE /api/v1/sessions/{id}", g.action(func(r *http.Request) (string, error) {
		id := r.PathValue("id")
		return fmt.Sprintf("deleted the session of %q", id), srv.DeleteSession(id)
	}))
	mux.Handle("DELETE /api/v1/retained/{topic}", g.action(func(r *http.Request) (string, error) {
		topic := r.PathValue("topic")
		return fmt.Sprintf("cleared the retained message on %q", topic), srv.DeleteRetained(topic)
	}))
	mux.Handle("POST /api/v1/deadletters/{topic}/republish", g.action(func(r *http.Request) (string, error) {
		topic := r.PathValue("topic")
		return fmt.Sprintf("republished the dead letter %q", topic), srv.RepublishDeadLetter(topic)
	}))
	mux.Handle("DELETE /api/v1/deadletters/{topic}", g.action(func(r *http.Request) (string, error) {
		topic := r.PathValue("topic")
		return fmt.Sprintf("dropped the dead letter %q", topic), srv.DropDeadLetter(topic)
	}))
	mux.Handle("POST /api/v1/reload", g.action(func(*http.Request) (string, error) {
		if a.o.reload == nil {
			return "", errNoReload
		}
		return "reloaded the configuration", a.o.reload()
	}))
	mux.Handle("PUT /api/v1/log/level", g.action(setLogLevel))
}

// errNoReload: the handler was made without a reload (an embedder's).
var errNoReload = errors.New("reload is not available here")

// inputError is a request the API cannot act on: 400.
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }

func badInput(format string, args ...any) error {
	return &inputError{fmt.Sprintf(format, args...)}
}

// setLogLevel sets zerolog's global level from ?level= or the body (the
// level alone, or {"level": "..."}), until a restart or a reload that
// changes log.level.
func setLogLevel(r *http.Request) (string, error) {
	name := r.URL.Query().Get("level")
	if name == "" {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxActionBody))
		if err != nil {
			return "", badInput("reading the body: %v", err)
		}
		name = strings.TrimSpace(string(body))
		if strings.HasPrefix(name, "{") {
			var v struct {
				Level string `json:"level"`
			}
			if err := json.Unmarshal(body, &v); err != nil {
				return "", badInput("body: %v", err)
			}
			name = v.Level
		}
	}
	level, err := zerolog.ParseLevel(name)
	if err != nil || name == "" {
		return "", badInput("level: want trace, debug, info, warn, error, fatal, panic or disabled, got %q", name)
	}
	was := zerolog.GlobalLevel()
	zerolog.SetGlobalLevel(level)
	return fmt.Sprintf("set the log level to %s (was %s)", level, was), nil
}

// action serves an action behind the read guard and the CSRF checks:
// do acts and says what it did, logged with who asked.
func (g *guard) action(do func(r *http.Request) (string, error)) http.Handler {
	return g.wrap(func(w http.ResponseWriter, r *http.Request) {
		if why := g.crossSite(r); why != "" {
			g.log.Info().Str("method", r.Method).Str("path", r.URL.Path).Str("remote", r.RemoteAddr).Str("by", who(r)).
				Str("refused", why).Msg("API action refused")
			writeError(w, http.StatusForbidden, "%s", why)
			return
		}
		did, err := do(r)
		if err != nil {
			writeError(w, actionStatus(err), "%v", err)
			return
		}
		g.log.Info().Str("remote", r.RemoteAddr).Str("by", who(r)).Msg("API: " + did)
		writeJSON(w, http.StatusOK, struct {
			Done string `json:"done"`
		}{did})
	})
}

// crossSite says why a request may have come from a web page on another
// site, or "" when it cannot have.
func (g *guard) crossSite(r *http.Request) string {
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Sprintf("Origin %q is not this API's (Host %q): actions are not served to other sites", origin, r.Host)
		}
	}
	// A browser sends a Basic password it was given by itself, with any
	// request to the address, even one a page on another site makes: only
	// the token is proof that the request is not such a page's.
	if who(r) != "token" && r.Header.Get(actionHeader) == "" {
		return "an action needs the header " + actionHeader + ": 1 unless it carries metrics.token " +
			"(so that a web page cannot send it from a visitor's browser)"
	}
	return ""
}

// actionStatus is the HTTP status of an action's error.
func actionStatus(err error) int {
	var in *inputError
	switch {
	case errors.As(err, &in):
		return http.StatusBadRequest
	case errors.Is(err, mqttd.ErrNoSession), errors.Is(err, mqttd.ErrNoRetained), errors.Is(err, mqttd.ErrNoDeadLetter):
		return http.StatusNotFound
	case errors.Is(err, mqttd.ErrSessionOnline), errors.Is(err, mqttd.ErrNotConnected):
		return http.StatusConflict
	case errors.Is(err, mqttd.ErrBrokerTopic):
		return http.StatusForbidden
	case errors.Is(err, errNoReload):
		return http.StatusNotImplemented
	case errors.Is(err, mqttd.ErrServerClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, cluster.ErrNoAnswer): // the node that owns the client
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}
