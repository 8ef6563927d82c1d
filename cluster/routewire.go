package cluster

import (
	"encoding/binary"
	"errors"
)

// Wire formats. A route message: kind, the node's name (length first),
// generation and sequence (uvarints), and for an add or remove a flag
// byte (1: shared) and the filter, the rest of the message. A snapshot
// part: generation, sequence, a last flag, then per filter its flag and
// its length-prefixed bytes.

var errRoute = errors.New("cluster: malformed route message")

func appendRouteMsg(b []byte, m routeMsg) []byte {
	b = append(b, m.kind)
	b = binary.AppendUvarint(b, uint64(len(m.name)))
	b = append(b, m.name...)
	b = binary.AppendUvarint(b, m.gen)
	b = binary.AppendUvarint(b, m.seq)
	if m.kind == routeAdd || m.kind == routeRemove {
		b = append(b, flagByte(m.key.shared))
		b = append(b, m.key.filter...)
	}
	return b
}

func flagByte(shared bool) byte {
	if shared {
		return 1
	}
	return 0
}

// decodeRouteMsg parses a route message from the network; it never
// panics.
func decodeRouteMsg(b []byte) (routeMsg, error) {
	var m routeMsg
	if len(b) == 0 {
		return m, errRoute
	}
	m.kind, b = b[0], b[1:]
	name, b, ok := cutBytes(b)
	if !ok || validNodeName(string(name)) != nil || len(name) == 0 {
		return m, errRoute
	}
	m.name = string(name)
	if m.gen, b, ok = cutUvarint(b); !ok {
		return m, errRoute
	}
	if m.seq, b, ok = cutUvarint(b); !ok {
		return m, errRoute
	}
	switch m.kind {
	case routeSummary, routeHello, routeBye:
		if len(b) != 0 {
			return m, errRoute
		}
		return m, nil
	case routeAdd, routeRemove:
		if len(b) < 2 || b[0] > 1 {
			return m, errRoute
		}
		m.key = routeKey{filter: string(b[1:]), shared: b[0] == 1}
		if !validRouteFilter(m.key.filter) {
			return m, errRoute
		}
		return m, nil
	}
	return m, errRoute
}

// validRouteFilter reports whether f is a filter a node announces.
func validRouteFilter(f string) bool {
	t, ok := wantedTopic(f)
	return ok && t == f && len(f) <= 65535
}

func appendSnapPart(b []byte, gen, seq uint64, last bool, keys []routeKey) []byte {
	b = binary.AppendUvarint(b, gen)
	b = binary.AppendUvarint(b, seq)
	b = append(b, flagByte(last))
	for _, k := range keys {
		b = append(b, flagByte(k.shared))
		b = binary.AppendUvarint(b, uint64(len(k.filter)))
		b = append(b, k.filter...)
	}
	return b
}

// decodeSnapPart parses a snapshot part from the network; it never
// panics.
func decodeSnapPart(b []byte) (gen, seq uint64, last bool, keys []routeKey, err error) {
	var ok bool
	if gen, b, ok = cutUvarint(b); !ok {
		return 0, 0, false, nil, errRoute
	}
	if seq, b, ok = cutUvarint(b); !ok || len(b) == 0 || b[0] > 1 {
		return 0, 0, false, nil, errRoute
	}
	last, b = b[0] == 1, b[1:]
	for len(b) > 0 {
		flag := b[0]
		f, rest, ok := cutBytes(b[1:])
		if !ok || flag > 1 || !validRouteFilter(string(f)) {
			return 0, 0, false, nil, errRoute
		}
		keys = append(keys, routeKey{filter: string(f), shared: flag == 1})
		b = rest
	}
	return gen, seq, last, keys, nil
}

// cutUvarint reads a uvarint off b, in its shortest form only (a last
// byte of 0 adds nothing): what a node sends is what binary.AppendUvarint
// wrote, and a decoder that takes two spellings of one value lets a
// record be read as something other than what was encoded.
func cutUvarint(b []byte) (uint64, []byte, bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 || n > 1 && b[n-1] == 0 {
		return 0, b, false
	}
	return v, b[n:], true
}

// cutBytes reads a uvarint length and that many bytes off b.
func cutBytes(b []byte) (field, rest []byte, ok bool) {
	l, b, ok := cutUvarint(b)
	if !ok || l > uint64(len(b)) {
		return nil, b, false
	}
	return b[:l], b[l:], true
}
