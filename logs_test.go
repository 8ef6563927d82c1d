package mqttd_test

import (
	"net"
	"testing"

	"github.com/rs/zerolog"

	"mqttd"
	"mqttd/packets"
)

// TestInfoLogs checks what an operator sees at the info level: one line
// per connect and per disconnect with its reason, one per takeover and per
// will published; a connection that never sent CONNECT and closed quietly
// (a port scan) logs nothing at info.
func TestInfoLogs(t *testing.T) {
	t.Parallel()
	logs := &logLines{}
	srv, addr := startServer(t, mqttd.Options{Logger: zerolog.New(logs).Level(zerolog.InfoLevel)})

	scan, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	scan.Close()

	cp := &packets.Connect{ClientID: "dev", UsernameFlag: true, Username: "alice", KeepAlive: 30}
	setWill(cp, "status/dev")
	old := connectAs(t, addr, packets.V311, cp)
	connectAs(t, addr, packets.V311, &packets.Connect{ClientID: "dev", CleanStart: true, UsernameFlag: true, Username: "alice"})
	old.expectClosed()
	waitFor(t, "the old connection's line", func() bool { return len(logs.find("client disconnected")) == 1 })
	waitFor(t, "every connection closed but the new one", func() bool { return srv.Stats().Connections == 1 })

	connected := logs.find("client connected")
	if len(connected) != 2 || connected[0]["client_id"] != "dev" || connected[0]["username"] != "alice" ||
		connected[0]["keepalive"] != float64(30) || connected[0]["remote"] == nil {
		t.Errorf("connect lines %v", connected)
	}
	if got := logs.find("session taken over by a new connection"); len(got) != 1 || got[0]["session_kept"] != false {
		t.Errorf("takeover lines %v", got)
	}
	if got := logs.find("client disconnected"); got[0]["reason"] != "taken_over" {
		t.Errorf("disconnect line %v", got[0])
	}
	if got := logs.find("will published"); len(got) != 1 || got[0]["topic"] != "status/dev" || got[0]["client_id"] != "dev" {
		t.Errorf("will lines %v", got)
	}
	if got := logs.find("connection closed"); len(got) != 0 {
		t.Errorf("a connection without CONNECT logged at info: %v", got)
	}
}
