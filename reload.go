package mqttd

import (
	"reflect"
	"strings"
)

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
