# Appended to the copy of Mosquitto's test/mosq_test.py by
# `hack/conformance/run -normalise`. The suite compares every packet byte
# for byte, and an MQTT 5.0 CONNACK's properties carry the server's own
# limits in the server's own order. In this mode a 5.0 CONNACK is read whole
# and compared by meaning: its flags, reason code and properties must match,
# in any order, except Receive Maximum and Maximum Packet Size (the
# server's limits, MQTT 5.0 3.2.2.3.3 and 3.2.2.3.6), which may be absent
# or hold any value. Every other packet is compared byte for byte as before.

_strict_expect_packet = expect_packet


def _read_packet(sock):
    head = sock.recv(1)
    if len(head) == 0:
        return head
    mult, rl, raw = 1, 0, head
    while True:
        b = sock.recv(1)
        if len(b) == 0:
            return raw
        raw += b
        rl += (b[0] & 127) * mult
        mult *= 128
        if b[0] & 128 == 0:
            break
    body = b""
    while len(body) < rl:
        chunk = sock.recv(rl - len(body))
        if len(chunk) == 0:
            break
        body += chunk
    return raw + body


def _connack_props(packet):
    # packet: a whole CONNACK; returns (flags, rc, {id: value bytes}) or None.
    i = 1
    while packet[i] & 128:
        i += 1
    body = packet[i + 1:]
    if len(body) < 3:
        return None
    plen, mult, j = 0, 1, 2
    while True:
        plen += (body[j] & 127) * mult
        mult *= 128
        j += 1
        if body[j - 1] & 128 == 0:
            break
    props, p = {}, body[j:j + plen]
    sizes = {0x11: 4, 0x12: None, 0x13: 2, 0x15: None, 0x16: None, 0x1A: None, 0x1C: None,
             0x1F: None, 0x21: 2, 0x22: 2, 0x24: 1, 0x25: 1, 0x26: None, 0x27: 4,
             0x28: 1, 0x29: 1, 0x2A: 1}
    k = 0
    while k < len(p):
        ident = p[k]
        k += 1
        if ident not in sizes:
            return None
        n = sizes[ident]
        if n is None:
            n = 2 + (p[k] << 8 | p[k + 1])
            if ident == 0x26:  # user property: two strings
                n += 2 + (p[k + n] << 8 | p[k + n + 1])
        props.setdefault(ident, []).append(bytes(p[k:k + n]))
        k += n
    return body[0], body[1], props


def expect_packet(sock, name, expected):
    if len(expected) < 5 or expected[0] != 0x20:
        return _strict_expect_packet(sock, name, expected)
    recvd = _read_packet(sock)
    if recvd == expected:
        return True
    got, want = _connack_props(recvd), _connack_props(expected)
    if got is not None and want is not None and got[:2] == want[:2]:
        server_limits = (0x21, 0x27)
        g = {k: v for k, v in got[2].items() if k not in server_limits}
        w = {k: v for k, v in want[2].items() if k not in server_limits}
        if g == w:
            return True
    if packet_matches(name, recvd, expected):
        return True
    raise TestError
