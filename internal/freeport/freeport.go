// Package freeport picks loopback ports for servers that must be told
// their port before they start (nats-server's routes, Mosquitto, an mqttd
// child process), for tests and the benchmark scripts.
//
// A port from binding port 0 is free when picked, but it is one of the
// kernel's ephemeral ports, which every outgoing connection's source
// port is also taken from: on a machine busy with other tests one of
// their connections at times took it before the server bound it, and the
// server never became ready. So Pick looks below the ephemeral range,
// where only an explicit bind can land, at random, so that processes
// picking side by side seldom try the same port.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// floor is where Pick starts looking: above the well-known and the usual
// fixed service ports, and the cluster examples' (18xxx).
const floor = 20000

// Pick returns a loopback TCP port that nothing listens on now, below the
// ephemeral range when one is free there.
func Pick() (int, error) {
	low := ephemeralLow()
	for range 200 {
		port := floor + rand.IntN(low-floor)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken
		}
		ln.Close()
		return port, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("freeport: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port of Linux's ephemeral range
// (ip_local_port_range), or its usual 32768 where that cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if low, err := strconv.Atoi(f[0]); err == nil && low > floor+1000 {
				return low
			}
		}
	}
	return 32768
}
