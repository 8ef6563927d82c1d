package mqttd_test

import (
	"errors"
	"strings"
	"testing"

	"mqttd"
	"mqttd/packets"
)

// TestClusterAdminOnOwner: a kick or a session delete asked of one node
// for a client another node owns is done there, with the answers one node
// gives: an online session is not deleted, a kick tells the client 0x98
// and keeps its session, an offline session is not connected, a delete
// or a kick that discards the session ends it, and an id no node owns has
// no session.
func TestClusterAdminOnOwner(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	one, two := nodes[0], nodes[1]

	dev, present := reconnect5(t, two.addr, "dev", 300)
	if present {
		t.Fatal("a new client id came with a session")
	}
	if err := one.srv.DeleteSession("dev"); !errors.Is(err, mqttd.ErrSessionOnline) {
		t.Fatalf("DeleteSession on node 1 of a client online on node 2: %v, want ErrSessionOnline", err)
	}
	if err := one.srv.Disconnect("dev", false); err != nil {
		t.Fatalf("Disconnect on node 1 of a client on node 2: %v", err)
	}
	if d, ok := dev.read().(*packets.Disconnect); !ok || d.ReasonCode != packets.AdministrativeAction {
		t.Fatalf("got %+v, want DISCONNECT 0x98", d)
	}
	dev.expectClosed()
	offline(t, two.srv, "dev")
	if st, ok := sessionOf(t, two.srv, "dev"); !ok || !st.Persistent {
		t.Fatalf("node 2 after the kick: %+v (listed %v), want the persistent session kept", st, ok)
	}
	if err := one.srv.Disconnect("dev", false); !errors.Is(err, mqttd.ErrNotConnected) {
		t.Fatalf("Disconnect on node 1 of an offline session on node 2: %v, want ErrNotConnected", err)
	}
	if err := one.srv.DeleteSession("dev"); err != nil {
		t.Fatalf("DeleteSession on node 1 of an offline session on node 2: %v", err)
	}
	if _, ok := sessionOf(t, two.srv, "dev"); ok {
		t.Fatal("node 2 still lists the deleted session")
	}

	dev2, _ := reconnect5(t, two.addr, "dev2", 300)
	if err := one.srv.Disconnect("dev2", true); err != nil {
		t.Fatalf("Disconnect with the session on node 1 of a client on node 2: %v", err)
	}
	dev2.expectClosed()
	if _, present := reconnect5(t, two.addr, "dev2", 300); present {
		t.Fatal("the session a kick discarded came back")
	}

	if err := one.srv.Disconnect("nobody", false); !errors.Is(err, mqttd.ErrNoSession) {
		t.Fatalf("Disconnect of an id no node owns: %v, want ErrNoSession", err)
	}
}

// TestClusterClientsListed: a listing of sessions on one node has every
// node's, each with its node's name, in client id order and in pages
// across nodes, filtered as on one node.
func TestClusterClientsListed(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	for i, id := range []string{"a1", "b1", "b2", "c1"} {
		at := nodes[map[byte]int{'a': 0, 'b': 1, 'c': 2}[id[0]]]
		if i == 3 {
			connectRaw(t, at.addr, &packets.Connect{ClientID: id}).send(&packets.Disconnect{})
			offline(t, at.srv, id)
			continue
		}
		connectRaw(t, at.addr, &packets.Connect{ClientID: id, CleanStart: true})
	}
	for _, n := range nodes {
		waitFor(t, "each node to see the three nodes alive", func() bool {
			st, _ := n.srv.Cluster()
			return st.Nodes == 3
		})
	}
	want := "a1@node1 b1@node2 b2@node2 c1@node3"
	if got, next := listed(nodes[0].srv.ClusterClients("", 0, mqttd.ClientFilter{})); got != want || next != "" {
		t.Fatalf("node 1 listed %q (next %q), want %q", got, next, want)
	}
	got, next := listed(nodes[1].srv.ClusterClients("", 2, mqttd.ClientFilter{}))
	if got != "a1@node1 b1@node2" || next != "b1" {
		t.Fatalf("node 2's first page of 2: %q, next %q", got, next)
	}
	if got, next = listed(nodes[1].srv.ClusterClients(next, 2, mqttd.ClientFilter{})); got != "b2@node2 c1@node3" || next != "" {
		t.Fatalf("node 2's second page of 2: %q, next %q", got, next)
	}
	if got, _ := listed(nodes[2].srv.ClusterClients("", 0, mqttd.ClientFilter{Search: "b"})); got != "b1@node2 b2@node2" {
		t.Fatalf("node 3's search for b: %q", got)
	}
	if got, _ := listed(nodes[2].srv.ClusterClients("", 0, mqttd.ClientFilter{Offline: true})); got != "c1@node3" {
		t.Fatalf("node 3's offline sessions: %q", got)
	}
}

// listed renders a page as "id@node" words, with its next cursor.
func listed(page []mqttd.ClientState, next string) (string, string) {
	var words []string
	for _, c := range page {
		words = append(words, c.ID+"@"+c.Node)
	}
	return strings.Join(words, " "), next
}
