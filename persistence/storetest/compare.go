package storetest

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"mqttd/persistence"
)

// maxDiffLines keeps a failure on a large snapshot readable.
const maxDiffLines = 20

// checkSnapshot checks what every Snapshot must hold whatever was applied.
func checkSnapshot(s *persistence.Snapshot) error {
	if s == nil {
		return fmt.Errorf("nil Snapshot")
	}
	if s.Retained == nil || s.Messages == nil {
		return fmt.Errorf("nil map in Snapshot (Retained nil: %t, Messages nil: %t)",
			s.Retained == nil, s.Messages == nil)
	}
	for id, m := range s.Messages {
		if m == nil || m.ID != id {
			return fmt.Errorf("message %d given as %s", id, fmtMessage(m))
		}
	}
	for topic, id := range s.Retained {
		if s.Messages[id] == nil {
			return fmt.Errorf("retained %q refers to message %d, not in Messages", topic, id)
		}
	}
	for _, st := range s.Sessions {
		for i, o := range st.Outbound {
			if i > 0 && st.Outbound[i-1].Seq >= o.Seq {
				return fmt.Errorf("session %q: outbound not in Seq order: %d then %d",
					st.Session.ID, st.Outbound[i-1].Seq, o.Seq)
			}
			if s.Messages[o.MessageID] == nil {
				return fmt.Errorf("session %q: outbound %d refers to message %d, not in Messages",
					st.Session.ID, o.Seq, o.MessageID)
			}
		}
	}
	return nil
}

// diff says how got differs from want, "" if it does not, ignoring what
// the contract leaves open (see the package comment).
func diff(got, want *persistence.Snapshot) string {
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }

	gotSessions, dup := bySessionID(got.Sessions)
	if dup != "" {
		add("session %q twice", dup)
	}
	wantSessions, _ := bySessionID(want.Sessions)
	for _, id := range unionKeys(gotSessions, wantSessions) {
		g, inGot := gotSessions[id]
		w, inWant := wantSessions[id]
		switch {
		case !inWant:
			add("unexpected session %s", fmtState(g))
		case !inGot:
			add("missing session %s", fmtState(w))
		case !equal(normalise(g), normalise(w)):
			add("session %q:\n\tgot  %s\n\twant %s", id, fmtState(g), fmtState(w))
		}
	}
	for _, topic := range unionKeys(got.Retained, want.Retained) {
		g, inGot := got.Retained[topic]
		w, inWant := want.Retained[topic]
		if inGot != inWant || g != w {
			add("retained %q: got %s, want %s", topic, fmtRef(g, inGot), fmtRef(w, inWant))
		}
	}
	for _, id := range unionKeys(got.Messages, want.Messages) {
		g, w := got.Messages[id], want.Messages[id]
		if !equal(g, w) {
			add("message %d:\n\tgot  %s\n\twant %s", id, fmtMessage(g), fmtMessage(w))
		}
	}
	if len(lines) > maxDiffLines {
		lines = append(lines[:maxDiffLines], fmt.Sprintf("(and %d more)", len(lines)-maxDiffLines))
	}
	return strings.Join(lines, "\n")
}

func bySessionID(states []persistence.SessionState) (map[string]persistence.SessionState, string) {
	m := make(map[string]persistence.SessionState, len(states))
	dup := ""
	for _, st := range states {
		if _, ok := m[st.Session.ID]; ok {
			dup = st.Session.ID
		}
		m[st.Session.ID] = st
	}
	return m, dup
}

func unionKeys[K cmp.Ordered, V any](a, b map[K]V) []K {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// normalise orders what Load may give in any order.
func normalise(st persistence.SessionState) persistence.SessionState {
	st.Subscriptions = slices.SortedFunc(slices.Values(st.Subscriptions),
		func(a, b persistence.Subscription) int { return strings.Compare(a.Filter, b.Filter) })
	st.AwaitingRel = slices.Sorted(slices.Values(st.AwaitingRel))
	st.Forwards = slices.SortedFunc(slices.Values(st.Forwards),
		func(a, b persistence.Forward) int { return cmp.Compare(a.PacketID, b.PacketID) })
	st.Stamps = slices.SortedFunc(slices.Values(st.Stamps), func(a, b persistence.SeenStamp) int {
		return cmp.Or(cmp.Compare(a.Stamp.Node, b.Stamp.Node), cmp.Compare(a.Stamp.Seq, b.Stamp.Seq))
	})
	return st
}

// equal is reflect.DeepEqual but for nil and empty slices and maps being
// alike: a store may well give back an empty payload or property as nil.
func equal(a, b any) bool { return equalValue(reflect.ValueOf(a), reflect.ValueOf(b)) }

func equalValue(a, b reflect.Value) bool {
	if a.Kind() != b.Kind() || a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !equalValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.Len() != b.Len() {
			return false
		}
		for it := a.MapRange(); it.Next(); {
			bv := b.MapIndex(it.Key())
			if !bv.IsValid() || !equalValue(it.Value(), bv) {
				return false
			}
		}
		return true
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return equalValue(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !equalValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	default:
		return a.Equal(b)
	}
}

func fmtRef(id uint64, ok bool) string {
	if !ok {
		return "none"
	}
	return fmt.Sprint(id)
}

func fmtState(st persistence.SessionState) string {
	will := "<nil>"
	if st.Will != nil {
		will = fmt.Sprintf("{Message:%s At:%d}", fmtMessage(&st.Will.Message), st.Will.At)
	}
	return fmt.Sprintf("{Session:%+v Subscriptions:%+v Outbound:%+v AwaitingRel:%v Will:%s}",
		st.Session, st.Subscriptions, st.Outbound, st.AwaitingRel, will)
}

func fmtMessage(m *persistence.Message) string {
	if m == nil {
		return "<none>"
	}
	payload := m.Payload
	more := ""
	if len(payload) > 32 {
		payload, more = payload[:32], fmt.Sprintf("...(%d bytes)", len(m.Payload))
	}
	return fmt.Sprintf("{ID:%d Topic:%q Payload:%q%s QoS:%d Retain:%t Properties:%+v Expiry:%d Origin:%q}",
		m.ID, m.Topic, payload, more, m.QoS, m.Retain, m.Properties, m.Expiry, m.Origin)
}
