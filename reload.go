package mqttd

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"mqttd/auth"
	"mqttd/auth/passwd"
	"mqttd/internal/fileperm"
	"mqttd/packets"
	"mqttd/persistence"
	"mqttd/session"
)

// Changing a running broker: SetLimits applies new limits, Reload (on
// SIGHUP) reads the password and ACL files again, ends the connections of
// users a file no longer lets in and drops the subscriptions an ACL no
// longer allows.

// reloadableLimits are the limits SetLimits changes in a running broker,
// by their YAML keys: each is read where it is used (at accept, CONNECT,
// SUBSCRIBE, a retained message), so a new value simply applies from the
// next use. The others are built into sessions, connections, decoders
// and budgets when the broker starts, and need a restart.
var reloadableLimits = map[string]bool{
	"max_connections":                   true,
	"max_connections_per_address":       true,
	"max_sessions":                      true,
	"max_subscriptions_per_client":      true,
	"max_filter_length":                 true,
	"max_subscription_bytes_per_client": true,
	"max_subscription_bytes_total":      true,
	"max_overlapping_subscriptions":     true,
	"max_retained":                      true,
	"max_retained_bytes":                true,
	"retained_send_refill":              true,
	"max_keepalive":                     true,
	"refuse_keepalive_v311":             true,
	"max_session_expiry":                true,
	"persistent_session_expiry":         true,
	"connect_timeout":                   true,
	"max_client_id_length":              true,
	"max_username_length":               true,
	"write_timeout":                     true,
	"frame_timeout":                     true,
}

// limits returns the limits in force: Options.Limits, with what SetLimits
// changed since.
func (s *Server) limits() *Limits { return s.lim.Load() }

// SetLimits applies l (zero values meaning the defaults, as in Options)
// to the running broker, for SIGHUP. The limits read where they are used
// (connections, sessions and subscriptions per client, retained
// messages, keepalive, session expiry, timeouts, identifier lengths) take
// effect from their next use; what clients already hold past a lowered
// limit stays. It returns the keys (limits.max_sessions) it applied and
// those that changed but need a restart, or every problem with l, then
// changing nothing.
func (s *Server) SetLimits(l Limits) (applied, needRestart []string, err error) {
	if err := (Options{Limits: l}).Validate(); err != nil {
		return nil, nil, err
	}
	next := Options{Limits: l}.WithDefaults().Limits
	s.limMu.Lock()
	defer s.limMu.Unlock()
	cur := *s.limits()
	upd := cur
	vn, vc, vu := reflect.ValueOf(next), reflect.ValueOf(cur), reflect.ValueOf(&upd).Elem()
	for i := range vn.NumField() {
		if vn.Field(i).Interface() == vc.Field(i).Interface() {
			continue
		}
		name, _, _ := strings.Cut(vn.Type().Field(i).Tag.Get("yaml"), ",")
		if reloadableLimits[name] {
			vu.Field(i).Set(vn.Field(i))
			applied = append(applied, "limits."+name)
		} else {
			needRestart = append(needRestart, "limits."+name)
		}
	}
	s.lim.Store(&upd)
	return applied, needRestart, nil
}

// Reload reads again what the broker read from files: the password and
// ACL files (Options.Auth), and the certificates of tls and wss listeners.
// New connections use the new files; open ones keep their TLS session,
// but every subscription is asked about again under the new rules and
// taken away if they no longer grant it, messages already queued are
// delivered only if the client may still read them, and a user the
// password file no longer has is disconnected (revokeDeleted). A file that does not
// load leaves its old contents in force (never allowing all instead); the
// error says which and why.
func (s *Server) Reload() error {
	s.mu.Lock()
	lns := append([]*listener(nil), s.listeners...)
	s.mu.Unlock()
	errs := []error{s.reloadAuth()}
	if n := s.revokeDeleted(); n > 0 {
		s.log.Warn().Int("connections", n).Msg("connections ended: the reloaded password file no longer has their users")
	}
	if n := s.recheckSubscriptions(); n > 0 {
		s.log.Info().Int("subscriptions", n).Msg("subscriptions revoked: the reloaded rules no longer grant them")
	}
	for _, ln := range lns {
		if r, ok := ln.l.(interface{ Reload() error }); ok {
			if err := r.Reload(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", ln.name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// reloadAuth reads every password and ACL file again. A file that fails
// keeps its old contents (never allowing all instead); the error names
// it.
func (s *Server) reloadAuth() error {
	f := s.authFiles
	if f == nil {
		return nil
	}
	var errs []error
	for _, p := range sortedKeys(f.passwd) {
		if err := f.passwd[p].Reload(); err != nil {
			errs = append(errs, fmt.Errorf("password file kept as it was: %w", fileperm.Explain(err, p)))
			continue
		}
		s.warnLegacy(p, f.passwd[p])
	}
	for _, p := range sortedKeys(f.acl) {
		if err := f.acl[p].Reload(); err != nil {
			errs = append(errs, fmt.Errorf("ACL file kept as it was: %w", fileperm.Explain(err, p)))
		}
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// recheckSubscriptions asks the Authorizer again about every subscription
// after a reload, and takes away those it no longer grants, from the trie,
// the session and the store. Messages already queued are checked as they
// are sent (pumpFrom). It returns how many it took away.
func (s *Server) recheckSubscriptions() int {
	if !s.readCheck {
		return 0
	}
	s.mu.Lock()
	cls := make([]*client, 0, s.clients.Len())
	for cl := range s.clients.All {
		cls = append(cls, cl)
	}
	s.mu.Unlock()
	revoked := 0
	for _, cl := range cls {
		gone := s.revokeDenied(cl)
		for _, f := range gone {
			if s.removeSubscription(f, cl) {
				s.stats.subscriptions.Add(-1)
			}
			s.log.Debug().Str("client_id", cl.id).Str("filter", f).Msg("subscription revoked: the reloaded rules no longer grant it")
		}
		revoked += len(gone)
	}
	s.stats.subsRevoked.Add(uint64(revoked))
	return revoked
}

// revokeDenied takes the subscriptions the Authorizer no longer grants out
// of cl's session (and the store), and returns their filters for the
// caller to take out of the trie.
func (s *Server) revokeDenied(cl *client) []string {
	who := cl.who.Load()
	if who == nil {
		return nil
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.dropped {
		return nil
	}
	var gone []string
	cl.sess.Subscriptions(func(sub session.Subscription) {
		f, err := s.topics.ParseFilter(sub.Filter)
		if err != nil || !s.authz.Authorize(*who, auth.Request{Action: auth.Subscribe, Topic: f.Topic, Group: f.Group,
			QoS: sub.Options.QoS}) {
			gone = append(gone, sub.Filter)
		}
	})
	for _, f := range gone {
		if cl.sess.Unsubscribe(f) && cl.stored {
			s.dur.oneLocked(persistence.DeleteSubscription(cl.id, f), nil)
		}
	}
	return gone
}

// revokeDeleted ends, after a reload, the connections of users whose
// entry in the password file of their listener is gone or changed (a new
// password): a 5.0 client is told DISCONNECT 0x87 (not authorized), a
// 3.1.1 one is closed. Their wills are then asked about again
// (willRefused) and not published: a revoked credential publishes
// nothing. It returns how many it ended.
func (s *Server) revokeDeleted() int {
	if len(s.authFiles.passwd) == 0 {
		return 0
	}
	s.mu.Lock()
	var gone []*conn
	for cl := range s.clients.All {
		cl.mu.Lock()
		c, stamp := cl.conn, cl.passwdStamp
		cl.mu.Unlock()
		if c == nil || stamp == 0 {
			continue
		}
		if g := s.gates[c.info.Listener]; g != nil && g.passwd != nil && !sameEntry(g.passwd, c.info.Username, stamp) {
			gone = append(gone, c)
		}
	}
	if s.closing.Load() {
		gone = nil // Shutdown closes them all, and waits for no more writers
	}
	// Counted under the registry lock, as Shutdown sets closing under it
	// before it waits for the writers.
	s.writers.Add(len(gone))
	s.mu.Unlock()
	for _, c := range gone {
		s.stats.clientsRevoked.Add(1)
		// Each on its own goroutine: telling a 5.0 client waits for its
		// outbox to drain, up to a second, and one stuck client must not
		// hold up the reload.
		go func() {
			defer s.writers.Done()
			c.sendDisconnectAsync(packets.NotAuthorized)
			c.closeWith(errRevoked)
		}()
	}
	return len(gone)
}

// staleEntry reports whether the password file of c's listener no longer
// has the entry with stamp that let c's user in.
func (c *conn) staleEntry(stamp uint32) bool {
	g := c.srv.gateOf(c.info.Listener)
	return g.passwd != nil && !sameEntry(g.passwd, c.info.Username, stamp)
}

// sameEntry reports whether a's file still has user's entry with stamp:
// any stamp will do when it is unknown (a will restored from the store).
func sameEntry(a *passwd.Authenticator, user string, stamp uint32) bool {
	cur, ok := a.Entry(user)
	return ok && (stamp == stampUnknown || cur == stamp)
}

// stampUnknown stands for a password-file login whose entry is not
// known: a session restored from the store keeps no stamp.
const stampUnknown = ^uint32(0)

// warnLegacy warns, at start and after a reload, of the $6$ entries of
// the password file at path: quicker to check than an unknown user
// (which costs what the dearest entry does), so a client timing its
// refusals can tell those names exist, and cheap to crack from a stolen
// file.
func (s *Server) warnLegacy(path string, a *passwd.Authenticator) {
	legacy := a.Legacy()
	if len(legacy) == 0 {
		return
	}
	const most = 10
	s.log.Warn().Str("password_file", path).Int("count", len(legacy)).Strs("users", legacy[:min(len(legacy), most)]).
		Msg("password file has $6$ entries (salted SHA-512, from Mosquitto before 2.0): cheap to crack, and answered " +
			"faster than unknown users, so their names can be told by timing; list them with " +
			"mqttd passwd --upgrade FILE and set each password again")
}
