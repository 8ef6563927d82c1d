package mqttd

import (
	"errors"
	"fmt"
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
