package listeners

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// originHint is what a refused page's operator needs: the setting that
// lets a page in.
const originHint = "list the page's origin (scheme://host:port) in the listener's allowed_origins, or give --ws-allowed-origin"

// originRefusal says why a browser's upgrade request is refused, or ""
// when it may go on. Browsers always send Origin on a WebSocket upgrade,
// so what follows applies to pages only; other clients are let in.
//
// A page is let in when its origin is in AllowedOrigins ("*": all), or
// when it comes from the host the browser connected to, on any port
// (Node-RED on :1880, a page on :8000). On a connection that arrived on
// a loopback address from a browser on this machine, the Host the
// browser asked for must be a loopback name: a page at
// http://attacker.example that rebinds its name to 127.0.0.1 would
// otherwise pass for the same host (DNS rebinding). A page from a
// loopback name that asked for a loopback name is on the browser's
// machine as the broker is, whichever of localhost, 127.0.0.1 or ::1
// each used: that holds behind a port forward too (Docker), where the
// connection's own address is not loopback.
func (l *Listener) originRefusal(r *http.Request) string {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	for _, o := range l.cfg.AllowedOrigins {
		if o == "*" || strings.EqualFold(strings.TrimSuffix(o, "/"), origin) {
			return ""
		}
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return "the Origin header is not a URL with a host"
	}
	host := hostname(r.Host)
	local := l.localBrowser(r)
	if local && !loopbackName(host) {
		return "the Host " + r.Host + " is not a loopback name on a loopback connection (DNS rebinding?)"
	}
	page := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if page == host || loopbackName(page) && loopbackName(host) {
		return ""
	}
	return "the page's origin is another site than the Host " + r.Host
}

// localBrowser reports whether the request came to a loopback address of
// this machine from a client on it: the socket's peer, or the client a
// trusted proxy names in X-Forwarded-For.
func (l *Listener) localBrowser(r *http.Request) bool {
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || !isLoopback(la) {
		return false
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return true
	}
	return isLoopback(l.clientAddr(r, net.TCPAddrFromAddrPort(peer)))
}

// isLoopback reports whether a is a loopback IP address.
func isLoopback(a net.Addr) bool {
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// hostname returns the host of a Host header without its port, lower
// case, without IPv6 brackets and a trailing dot.
func hostname(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// loopbackName reports whether host always means this machine: a loopback
// address, localhost, or a name under .localhost, which resolvers must
// answer with loopback (RFC 6761 section 6.3) and no attacker can make
// point elsewhere.
func loopbackName(host string) bool {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().IsLoopback()
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// refuseOrigin answers a page refused by originRefusal.
func (l *Listener) refuseOrigin(w http.ResponseWriter, r *http.Request, why string) {
	l.refuse(RefusedOrigin, &l.originWarned).Str("remote", r.RemoteAddr).Str("origin", r.Header.Get("Origin")).
		Str("host", r.Host).Str("reason", why).Str("fix", originHint).
		Msg("WebSocket upgrade refused: origin not allowed (allowed_origins; logged at most every 10 s)")
	http.Error(w, "WebSocket upgrade refused: "+why+"; "+originHint, http.StatusForbidden)
}
