package cluster

import (
	"bytes"
	"testing"

	"mqttd/packets"
	"mqttd/persistence"
)

// FuzzSessionRecords: the stream's records, which another node (or
// another build) wrote, decode to an error or to what encodes again to
// a record that decodes alike; never a panic.
func FuzzSessionRecords(f *testing.F) {
	rec := &sessionRec{
		session: persistence.Session{ID: "c1", Username: "u", Version: 5, Expiry: 60, ExpireAt: 99, Listener: "tcp"},
		node:    "n1",
		subs: map[string]persistence.Subscription{"a/#": {Filter: "a/#", ID: 7,
			Options: packets.SubOptions{QoS: 2, NoLocal: true, RetainHandling: 1}}},
		will: &persistence.Will{At: 5, Message: persistence.Message{ID: 3, Topic: "w", Payload: []byte("bye"), QoS: 1}},
	}
	b, err := encodeRec(rec)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b, false)
	msg, _ := persistence.AppendMessage(nil, &persistence.Message{Topic: "t", Payload: []byte("p"), QoS: 1})
	e, _ := appendEntry(nil, &persistence.Outbound{Seq: 1, MessageID: 4, QoS: 2, PacketID: 9, SubIDs: []uint32{1, 2}, Released: true}, msg)
	f.Add(e, true)
	f.Fuzz(func(t *testing.T, data []byte, entry bool) {
		if entry {
			o, m, err := decodeEntry(1, bytes.Clone(data))
			if err != nil {
				return
			}
			enc, err := persistence.AppendMessage(nil, m)
			if err != nil {
				return // properties a PUBLISH may not carry
			}
			again, err := appendEntry(nil, &o, enc)
			if err != nil {
				t.Fatalf("decoded entry does not encode: %v", err)
			}
			o2, _, err := decodeEntry(1, again)
			if err != nil || o2.PacketID != o.PacketID || o2.MessageID != o.MessageID || len(o2.SubIDs) != len(o.SubIDs) {
				t.Fatalf("entry %+v reads back as %+v (%v)", o, o2, err)
			}
			return
		}
		r, err := decodeRec(bytes.Clone(data))
		if err != nil {
			return
		}
		again, err := encodeRec(r)
		if err != nil {
			return
		}
		r2, err := decodeRec(again)
		if err != nil || r2.session != r.session || r2.node != r.node || len(r2.subs) != len(r.subs) || (r2.will == nil) != (r.will == nil) {
			t.Fatalf("record %+v reads back as %+v (%v)", r, r2, err)
		}
	})
}

// FuzzSessionRelRecords: an inbound QoS 2 id's record and a stamp's
// decode without a panic, and what decodes encodes back to the same.
func FuzzSessionRelRecords(f *testing.F) {
	m := persistence.Message{Topic: "t", Payload: []byte("p"), QoS: 2, Origin: "pub"}
	fwd, err := appendRel(nil, &persistence.Forward{PacketID: 3, Stamp: persistence.Stamp{Node: 1, Seq: 2}, Message: m})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(fwd)
	f.Add([]byte{ssVersion})
	f.Add(appendStamp(nil, 1e18))
	f.Fuzz(func(t *testing.T, data []byte) {
		if fw, err := decodeRel(3, bytes.Clone(data)); err == nil {
			again, err := appendRel(nil, fw)
			if err == nil && !bytes.Equal(again, data) {
				if fw2, err := decodeRel(3, again); err != nil || (fw2 == nil) != (fw == nil) || fw2 != nil && fw2.Stamp != fw.Stamp {
					t.Fatalf("record %x reads back as %+v, then %+v (%v)", data, fw, fw2, err)
				}
			}
		}
		if expiry, err := decodeStamp(data); err == nil {
			if again, err := decodeStamp(appendStamp(nil, expiry)); err != nil || again != expiry {
				t.Fatalf("stamp record %x reads back as %d, then %d (%v)", data, expiry, again, err)
			}
		}
	})
}

func TestParseSubject(t *testing.T) {
	p := sessionsPrefix("c1")
	s := subjectsOf("c1", "dev/1")
	for _, tc := range []struct {
		subject string
		kind    recordKind
		n       uint64
	}{
		{s.rec(), kindRec, 0},
		{s.entry(77), kindEntry, 77},
		{s.rel(65535), kindRel, 65535},
		{string(s) + "rel.0", kindUnknown, 0},
		{string(s) + "rel.65536", kindUnknown, 0},
		{string(s) + "m.x", kindUnknown, 0},
		{string(s) + "other", kindUnknown, 0},
		{s.stamp(persistence.Stamp{Node: 1 << 63, Seq: 5}), kindStamp, 0},
		{string(s) + "st.00000000000000000000000000000000", kindUnknown, 0},
		{string(s) + "st.0000000000000001000000000000000", kindUnknown, 0},
		{string(s) + "st.0000000000000001000000000000000A", kindUnknown, 0},
		{"mqttd.c2.ss.k.rec", kindUnknown, 0},
	} {
		key, kind, n, _ := parseSubject(p, tc.subject)
		if kind != tc.kind || n != tc.n || (kind != kindUnknown && key != ownerKey("dev/1")) {
			t.Errorf("parseSubject(%q) = %q, %d, %d; want kind %d, %d", tc.subject, key, kind, n, tc.kind, tc.n)
		}
	}
}
