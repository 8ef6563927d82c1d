package mqttd

import (
	"time"

	"mqttd/auth"
	"mqttd/persistence"
	"mqttd/session"
)

// restore gives the broker back what its store kept, at New: retained
// messages, and persistent sessions, offline until their clients come
// back, with their subscriptions, their queued and in-flight messages in
// order, inbound QoS 2 packet ids awaiting PUBREL and delayed wills.
// Expiry counts the time the broker was down: a session or message whose
// time passed meanwhile is dropped (and a session's will published). A
// session whose client was connected when the broker stopped counts its
// expiry from now.
func (s *Server) restore() error {
	d := s.dur
	snap, err := d.store.Load()
	if err != nil {
		return err
	}
	now := time.Now()
	var maxID uint64
	for id := range snap.Messages {
		maxID = max(maxID, id)
	}
	d.msgIDs.Store(maxID)
	msgs := make(map[uint64]*session.Message, len(snap.Messages))
	msg := func(id uint64) *session.Message {
		if m, ok := msgs[id]; ok {
			return m
		}
		pm := snap.Messages[id]
		if pm == nil {
			return nil
		}
		m := restoredMessage(pm)
		msgs[id] = m
		delete(snap.Messages, id) // copied: the store's copy can go
		return m
	}
	var gone persistence.Batch // what expired while the broker was down
	for topic, id := range snap.Retained {
		m := msg(id)
		if m == nil || m.Expired(now) {
			gone.DeleteRetained(topic)
			continue
		}
		if _, _, err := s.retain.Swap(topic, m); err != nil {
			s.log.Warn().Err(err).Str("topic", topic).Msg("stored retained message not restored")
			continue
		}
		s.stats.retained.Add(1)
		s.stats.retainedBytes.Add(int64(m.Size()))
	}
	var wills []leftWill // of sessions that ended while the broker was down
	restored := 0
	for i := range snap.Sessions {
		ss := &snap.Sessions[i]
		id := ss.Session.ID
		at := ss.Session.ExpireAt
		if at == 0 {
			at = now.Add(time.Duration(ss.Session.Expiry) * time.Second).UnixNano()
		}
		if at <= now.UnixNano() {
			gone.DeleteSession(id)
			if ss.Will != nil {
				wills = append(wills, s.restoredWill(ss))
			}
			continue
		}
		cl, expired := s.clientFrom(ss, msg, now)
		cl.stored = true
		cl.sess.SetExpireAt(at)
		for _, seq := range expired {
			gone.DeleteOutbound(id, seq)
		}
		s.clients.Put(cl)
		s.stats.sessions.Add(1)
		s.accountQueueLocked(cl)
		s.expiry.schedule(cl, at)
		if ss.Will != nil {
			s.delayWillLocked(cl, s.restoredWill(ss), time.Duration(max(ss.Will.At-now.UnixNano(), 0)), at)
		}
		restored++
		// Restored: what the store gave back of it can go, so that the
		// peak is not the whole store twice over.
		*ss = persistence.SessionState{}
	}
	if gone.Len() > 0 {
		if err := d.store.Apply(&gone); err != nil {
			return err
		}
	}
	for _, w := range wills {
		s.publishWill(w)
	}
	if restored > 0 || len(snap.Retained) > 0 {
		s.log.Info().Int("sessions", restored).Int64("retained", s.stats.retained.Load()).
			Int64("queued", s.stats.queued.Load()).Msg("state restored from the store")
	}
	return nil
}

// restoredWho is a restored session's client as the Authorizer knows it.
func restoredWho(ss *persistence.SessionState) *auth.ClientInfo {
	return &auth.ClientInfo{ClientID: ss.Session.ID, Username: ss.Session.Username, ProtocolVersion: ss.Session.Version,
		Listener: ss.Session.Listener}
}

// restoredWill is a restored session's will, asked about again when it
// is published. Whether the client logged in with the password file, and
// with which entry, is not stored: a user with a username did, unless the
// program decides logins (an Authenticator, enhanced methods) or the
// listener names clients by certificate (willRefused asks the gate); the
// will is published only if the file still has the user, whatever its
// entry now.
func (s *Server) restoredWill(ss *persistence.SessionState) leftWill {
	// In a cluster, whether it is published is its record's to say: the
	// other nodes may have published it while this one was down.
	w := leftWill{msg: restoredMessage(&ss.Will.Message), who: restoredWho(ss), clusterOnly: s.cluster != nil}
	if ss.Session.Username != "" && s.opts.Authenticator == nil && len(s.methods) == 0 {
		w.passwdStamp = stampUnknown
	}
	return w
}

// restoredMessage is a message as the store gave it back.
func restoredMessage(pm *persistence.Message) *session.Message {
	m := newMessage(pm.Topic, pm.Payload, pm.QoS, pm.Retain, &pm.Properties, pm.Origin)
	m.Expiry = pm.Expiry
	m.SetStoreID(pm.ID)
	return m
}

// clientFrom makes a session, not yet in the registry, from a stored one:
// its subscriptions in the trie, its entries, its inbound QoS 2 ids. The
// oldest entries may have been sent before: they go again with DUP, as
// after a reconnect. msg gives an entry's message (nil: none); the
// entries of messages missing or expired are left out and returned, for
// the store to drop.
func (s *Server) clientFrom(ss *persistence.SessionState, msg func(id uint64) *session.Message, now time.Time) (*client, []uint64) {
	var expired []uint64
	id := ss.Session.ID
	cl := &client{id: id, sess: session.New(s.sessionLimits(id))}
	cl.who.Store(restoredWho(ss))
	for _, sub := range ss.Subscriptions {
		isNew, err := s.addSubscription(sub.Filter, cl, subOptsOf(sub))
		if err != nil {
			s.log.Warn().Err(err).Str("client_id", id).Str("filter", sub.Filter).Msg("stored subscription not restored")
			continue
		}
		cl.sess.Subscribe(session.Subscription{Filter: sub.Filter, Options: sub.Options, ID: sub.ID})
		if isNew {
			s.stats.subscriptions.Add(1)
		}
	}
	dup := s.opts.Limits.MaxInflight
	for _, o := range ss.Outbound {
		e := session.Outbound{Seq: o.Seq, QoS: o.QoS, Retain: o.Retain, SubIDs: o.SubIDs, Released: o.Released}
		if !o.Released {
			if e.Msg = msg(o.MessageID); e.Msg == nil || e.Msg.Expired(now) {
				expired = append(expired, o.Seq)
				continue
			}
			if o.QoS > 0 && dup > 0 {
				e.Dup = true
				dup--
			}
		}
		cl.sess.Restore(e, &s.queueBudget)
	}
	restoreRelLocked(cl, ss.AwaitingRel, ss.Forwards, ss.Stamps)
	return cl, expired
}

// restoredMessages gives the messages of msgs as the broker holds them,
// one for each id however many entries refer to it.
func restoredMessages(msgs map[uint64]*persistence.Message) func(id uint64) *session.Message {
	made := make(map[uint64]*session.Message, len(msgs))
	return func(id uint64) *session.Message {
		if m, ok := made[id]; ok {
			return m
		}
		pm := msgs[id]
		if pm == nil {
			return nil
		}
		m := restoredMessage(pm)
		made[id] = m
		return m
	}
}
