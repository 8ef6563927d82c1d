package mqttd

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// An operator's kick or session delete made on one node of a cluster,
// for a client another node owns, is done there (cluster/admin.go
// carries it).

// The actions one node asks of another.
const (
	adminKick        = "kick"
	adminKickDiscard = "kick-discard"
	adminDelete      = "delete"
)

// adminOutcomes name the errors a node acting for another answers with,
// so that the asking node's caller can tell them apart (errors.Is).
var adminOutcomes = map[string]error{
	"no-session":    ErrNoSession,
	"not-connected": ErrNotConnected,
	"online":        ErrSessionOnline,
	"closed":        ErrServerClosed,
}

// elsewhere has action done on client id's session by the node of the
// cluster that owns it, when this node found none (here is
// ErrNoSession) and another node owns the id; otherwise it returns here.
func (s *Server) elsewhere(id, action string, here error) error {
	if !errors.Is(here, ErrNoSession) {
		return here
	}
	node := s.clusterNode()
	if node == nil {
		return here
	}
	owner, err := node.Owner(id)
	if err != nil || owner == "" || owner == node.Name() {
		return here
	}
	out, err := node.Admin(owner, action, id)
	switch {
	case err != nil:
		return fmt.Errorf("mqttd: client %q is on node %s: %w", id, owner, err)
	case out == "":
		return nil
	case adminOutcomes[out] != nil:
		return fmt.Errorf("%w: %q, on node %s", adminOutcomes[out], id, owner)
	}
	return fmt.Errorf("mqttd: node %s, client %q: %s", owner, id, out)
}

// adminHere does for another node action on this node's client id
// (cluster.AdminFunc).
func (s *Server) adminHere(action, id string) string {
	var err error
	switch action {
	case adminKick:
		err = s.disconnectHere(id, false)
	case adminKickDiscard:
		err = s.disconnectHere(id, true)
	case adminDelete:
		err = s.deleteSessionHere(id)
	default:
		return fmt.Sprintf("unknown action %q", action)
	}
	if err == nil {
		return ""
	}
	for name, e := range adminOutcomes {
		if errors.Is(err, e) {
			return name
		}
	}
	return err.Error()
}

// maxClusterPage bounds a page of sessions listed across the cluster:
// each node sends up to that many, in one NATS message.
const maxClusterPage = 1000

// clientsQuery asks another node for its page of sessions.
type clientsQuery struct {
	After  string       `json:"after"`
	Limit  int          `json:"limit"`
	Filter ClientFilter `json:"filter"`
}

// clientsAnswer is a node's page.
type clientsAnswer struct {
	Clients []ClientState `json:"clients"`
	Next    string        `json:"next"`
}

// ClusterClients is ClientsWhere over every node of the broker's
// cluster, each session with its node's name (ClientState.Node): the
// pages of this node and of the nodes that answered within a couple of
// seconds, merged in client id order. A limit of 0 or less, or above
// 1,000, is 1,000. Outside a cluster it is ClientsWhere.
func (s *Server) ClusterClients(after string, limit int, f ClientFilter) (page []ClientState, next string) {
	node := s.clusterNode()
	if node == nil {
		return s.ClientsWhere(after, limit, f)
	}
	if limit <= 0 || limit > maxClusterPage {
		limit = maxClusterPage
	}
	page, next = s.ClientsWhere(after, limit, f)
	for i := range page {
		page[i].Node = node.Name()
	}
	more := next != ""
	q, err := json.Marshal(clientsQuery{After: after, Limit: limit, Filter: f})
	if err != nil {
		return page, next
	}
	answers, err := node.List(q)
	if err != nil {
		s.log.Warn().Err(err).Msg("listing the other nodes' sessions")
	}
	for name, data := range answers {
		var a clientsAnswer
		if err := json.Unmarshal(data, &a); err != nil {
			s.log.Warn().Err(err).Str("node", name).Msg("a node's page of sessions unreadable")
			continue
		}
		for i := range a.Clients {
			a.Clients[i].Node = name
		}
		page = append(page, a.Clients...)
		more = more || a.Next != ""
	}
	slices.SortStableFunc(page, func(a, b ClientState) int { return strings.Compare(a.ID, b.ID) })
	// A session moving between nodes may be listed by both: once.
	page = slices.CompactFunc(page, func(a, b ClientState) bool { return a.ID == b.ID })
	if len(page) > limit {
		page, more = page[:limit], true
	}
	if more && len(page) > 0 {
		return page, page[len(page)-1].ID
	}
	return page, ""
}

// listHere answers another node's listing of sessions (cluster.ListFunc).
func (s *Server) listHere(query []byte) []byte {
	var q clientsQuery
	if json.Unmarshal(query, &q) != nil {
		return nil
	}
	var a clientsAnswer
	a.Clients, a.Next = s.ClientsWhere(q.After, min(max(q.Limit, 1), maxClusterPage), q.Filter)
	data, err := json.Marshal(a)
	if err != nil {
		return nil
	}
	return data
}
