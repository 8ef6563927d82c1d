// Package crash holds the crash tests of issue 15: they build the real
// mqttd binary, run it as a child process on a data directory, kill it at
// random moments (SIGKILL, SIGTERM, or SIGKILL followed by a simulated power
// cut from hack/powercut) while MQTT clients publish and subscribe, restart
// it on the same directory, and check that nothing acknowledged is lost,
// that QoS 2 stays exactly once and that nothing is invented.
//
// The package has no code outside its tests. The clients speak MQTT
// themselves over net.Conn with the mqttd/packets codec, because a crash test
// needs what library clients hide: packet ids, DUP, and the client's own
// in-flight state carried across a broker restart.
//
// The bridge tests (bridge_*_test.go, issue 37) do the same to a gateway
// forwarding to a remote mqttd through a bridge: killed while the uplink is
// down and again while its queue drains, every acknowledged message must
// reach the remote, QoS 2 exactly once, in order per topic.
//
// TestNetsplit (issue 38) runs three cluster nodes, built with the
// embedded NATS server, in network namespaces of their own, cuts one
// node's link and heals it, and checks the cluster's netsplit rules. It
// needs root and ip(8), and skips without them. The replicated sessions'
// tests (cluster_sessions_test.go, cluster_cycles_test.go, issue 39) kill
// nodes of a cluster keeping its persistent sessions in JetStream while a
// publisher goes on, and check that every acknowledged message reaches
// every persistent subscriber; CLUSTER_CYCLES=20 runs a longer campaign.
//
// By default the tests run a few kill cycles (well under a minute in all).
// CRASH_CYCLES=200 runs a long campaign and CRASH_SEED=n repeats a run whose
// seed a failing test logged. CRASH_MQTTD_BIN=path tests that binary
// instead of building ./cmd/mqttd (a build of another branch, say), and
// CRASH_MQTTD_NATS_BIN the -tags natsserver one TestNetsplit runs;
// CRASH_MQTTD_CONFIG adds lines to the broker's YAML config file.
package crash
