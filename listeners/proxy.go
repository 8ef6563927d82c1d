package listeners

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// The PROXY protocol (HAProxy's proxy-protocol.txt, versions 1 and 2): a
// load balancer that accepts the client's TCP connection sends a header
// naming the client before the client's own bytes.

// v2Signature starts a version 2 header.
var v2Signature = []byte("\r\n\r\n\x00\r\nQUIT\n")

const (
	// v1MaxLen is the longest version 1 line, CRLF included.
	v1MaxLen = 107
	// v2MaxLen bounds the addresses and TLVs of a version 2 header; the
	// format allows 64 KiB, but nothing a balancer sends about a TCP
	// client comes near this.
	v2MaxLen = 4096
)

var errNoProxyHeader = errors.New("PROXY protocol: no PROXY header")

// readProxyHeader reads a PROXY header from r, and not one byte more: the
// client's bytes after it stay in the socket for the engine to read. It
// returns the client's address, or ok false when the header names none
// (v1 UNKNOWN, v2 LOCAL or a family other than TCP over IPv4/IPv6: the
// balancer's own connection, a health check).
func readProxyHeader(r io.Reader) (src netip.AddrPort, ok bool, err error) {
	// 12 bytes are in every header: the v2 signature, and the shortest
	// v1 line is 15.
	var b [v1MaxLen]byte
	if _, err := io.ReadFull(r, b[:12]); err != nil {
		return src, false, fmt.Errorf("PROXY protocol: %w", err)
	}
	switch {
	case bytes.Equal(b[:12], v2Signature):
		return readV2(r)
	case bytes.HasPrefix(b[:12], []byte("PROXY ")):
		// A line's length is not known before its end: read up to the
		// LF a byte at a time.
		n := 12
		for b[n-1] != '\n' {
			if n == v1MaxLen {
				return src, false, errors.New("PROXY protocol: v1 line longer than 107 bytes")
			}
			if _, err := io.ReadFull(r, b[n:n+1]); err != nil {
				return src, false, fmt.Errorf("PROXY protocol: %w", err)
			}
			n++
		}
		return parseV1(string(b[:n]))
	}
	return src, false, errNoProxyHeader
}

// parseV1 parses a version 1 line, "PROXY TCP4 src dst sport dport\r\n".
func parseV1(line string) (netip.AddrPort, bool, error) {
	var none netip.AddrPort
	body, ok := strings.CutSuffix(line, "\r\n")
	if !ok {
		return none, false, errors.New("PROXY protocol: v1 line does not end in CRLF")
	}
	f := strings.Split(body, " ")
	if len(f) >= 2 && f[1] == "UNKNOWN" {
		return none, false, nil
	}
	if len(f) != 6 || (f[1] != "TCP4" && f[1] != "TCP6") {
		return none, false, fmt.Errorf("PROXY protocol: bad v1 line %q", body)
	}
	src, err1 := netip.ParseAddr(f[2])
	dst, err2 := netip.ParseAddr(f[3])
	sport, err3 := parsePort(f[4])
	_, err4 := parsePort(f[5])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return none, false, fmt.Errorf("PROXY protocol: bad v1 line %q: %w", body, err)
	}
	if src.Is4() != (f[1] == "TCP4") || dst.Is4() != src.Is4() || src.Zone() != "" || dst.Zone() != "" {
		return none, false, fmt.Errorf("PROXY protocol: v1 addresses do not match %s", f[1])
	}
	return netip.AddrPortFrom(src, sport), true, nil
}

// parsePort parses a decimal port without sign or leading zeros.
func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 1 && s[0] == '0' || s[0] < '0' || s[0] > '9' {
		return 0, fmt.Errorf("bad port %q", s)
	}
	p, err := strconv.ParseUint(s, 10, 16)
	return uint16(p), err
}

// readV2 reads the rest of a version 2 header after its signature.
func readV2(r io.Reader) (netip.AddrPort, bool, error) {
	var none netip.AddrPort
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return none, false, fmt.Errorf("PROXY protocol: %w", err)
	}
	verCmd, fam, n := h[0], h[1], int(binary.BigEndian.Uint16(h[2:]))
	if verCmd>>4 != 2 {
		return none, false, fmt.Errorf("PROXY protocol: v2 header of version %d", verCmd>>4)
	}
	cmd := verCmd & 0x0F
	if cmd > 1 {
		return none, false, fmt.Errorf("PROXY protocol: unknown v2 command %d", cmd)
	}
	if n > v2MaxLen {
		return none, false, fmt.Errorf("PROXY protocol: v2 header of %d bytes, more than %d", n, v2MaxLen)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return none, false, fmt.Errorf("PROXY protocol: %w", err)
	}
	if cmd == 0 { // LOCAL: the balancer's own connection
		return none, false, nil
	}
	var ip netip.Addr
	switch fam {
	case 0x11: // TCP over IPv4: src, dst, sport, dport
		if n < 12 {
			return none, false, errors.New("PROXY protocol: v2 TCP4 addresses cut short")
		}
		ip = netip.AddrFrom4([4]byte(body[:4]))
		return netip.AddrPortFrom(ip, binary.BigEndian.Uint16(body[8:])), true, nil
	case 0x21: // TCP over IPv6
		if n < 36 {
			return none, false, errors.New("PROXY protocol: v2 TCP6 addresses cut short")
		}
		ip = netip.AddrFrom16([16]byte(body[:16]))
		return netip.AddrPortFrom(ip, binary.BigEndian.Uint16(body[32:])), true, nil
	}
	// UNSPEC, UDP or unix: nothing that names a TCP client.
	return none, false, nil
}

// readProxy applies the PROXY protocol to a new connection: from a
// trusted network the header is required and names the client; from
// anywhere else a header is refused, since whoever sent it is trying to
// pass for someone else.
func (l *Listener) readProxy(sc *sockConn) error {
	peer, _ := netip.ParseAddrPort(sc.Conn.RemoteAddr().String())
	first, err := peekByte(sc.Conn)
	if err != nil {
		return fmt.Errorf("PROXY protocol: %w", err)
	}
	// Neither an MQTT CONNECT (0x10) nor a TLS record (0x16) starts with
	// the first byte of a header, so one byte is enough to tell.
	header := first == 'P' || first == v2Signature[0]
	if !l.trusted(peer.Addr()) {
		if header {
			return fmt.Errorf("PROXY header from %s, which is not in proxy_trusted", peer.Addr())
		}
		return nil
	}
	if !header {
		return errNoProxyHeader
	}
	src, ok, err := readProxyHeader(sc.Conn)
	if err != nil {
		return err
	}
	if ok {
		sc.remote = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src.Addr().Unmap(), src.Port()))
	}
	return nil
}
