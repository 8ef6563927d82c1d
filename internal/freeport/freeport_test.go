package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPick: the port is below the ephemeral range, and free: a listener
// binds it.
func TestPick(t *testing.T) {
	for range 20 {
		port, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if port < floor || port >= ephemeralLow() {
			t.Fatalf("port %d, want one in [%d, %d)", port, floor, ephemeralLow())
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d: %v", port, err)
		}
		ln.Close()
	}
}
