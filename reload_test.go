package mqttd_test

import (
	"slices"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestSetLimits lowers limits in a running broker: max_sessions applies
// to the next new session (the sessions there stay), max_inflight is
// named as needing a restart, and invalid limits change nothing.
func TestSetLimits(t *testing.T) {
	t.Parallel()
	srv, addr := startServer(t, mqttd.Options{})
	connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "a", CleanStart: true}).ping()
	connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "b", CleanStart: true}).ping()

	if _, _, err := srv.SetLimits(mqttd.Limits{MaxSessions: -1}); err == nil {
		t.Fatal("SetLimits took a negative max_sessions")
	}
	connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "c", CleanStart: true}).ping()

	applied, restart, err := srv.SetLimits(mqttd.Limits{MaxSessions: 3, MaxInflight: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(applied, []string{"limits.max_sessions"}) || !slices.Equal(restart, []string{"limits.max_inflight"}) {
		t.Errorf("applied %v, needs restart %v", applied, restart)
	}
	if st := srv.Stats(); st.Sessions != 3 {
		t.Fatalf("%d sessions, want the 3 there", st.Sessions)
	}
	_, ack := connectReply(t, addr, packets.V5, &packets.Connect{ClientID: "d", CleanStart: true})
	if ack.ReasonCode != packets.QuotaExceeded {
		t.Errorf("a fourth session: CONNACK %#x, want 0x97 under the new max_sessions", byte(ack.ReasonCode))
	}
	applied, restart, err = srv.SetLimits(mqttd.Limits{MaxSessions: 3, MaxInflight: 5})
	if err != nil || len(applied) != 0 || !slices.Equal(restart, []string{"limits.max_inflight"}) {
		t.Errorf("the same limits again: applied %v, needs restart %v, %v", applied, restart, err)
	}
}
