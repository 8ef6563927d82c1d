// Package dashboard is mqttd's web dashboard: a page of plain ES modules,
// canvas charts and one style sheet, embedded in the binary, that shows
// the broker live from the JSON API (/api/v1/) and acts through it, and
// watches a topic over MQTT-over-WebSocket with MQTT.js (its browser
// bundle embedded gzipped in static/vendor, copied there by
// hack/dashboard/vendor). cmd/mqttd serves it (Register) at / of the
// management address. The files reveal nothing about the broker: every datum comes
// from the API, which keeps its own checks (token, loopback Host, CSRF).
package dashboard

import (
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
)

//go:embed static
var static embed.FS

// asset is one file as served. Its bytes are read from the embedded file
// at each request rather than kept: embed.FS.ReadFile copies them to the
// heap, ~140 KB an idle broker held for a page seldom loaded.
type asset struct {
	name string // in static
	size int64
	// gzipped: the file is stored gzipped (a name ending in .gz, served
	// without it) and sent as is to a browser that takes gzip.
	gzipped bool
	ctype   string
	etag    string
}

// contentTypes are the types of the files the dashboard has, by
// extension; a file of another kind is not served.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".md":   "text/plain; charset=utf-8",
}

// assets are the embedded files by the path they are served at, read
// once.
var assets = sync.OnceValue(func() map[string]*asset {
	m := map[string]*asset{}
	err := fs.WalkDir(static, "static", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		served, gzipped := strings.CutSuffix(strings.TrimPrefix(name, "static"), ".gz")
		ctype, ok := contentTypes[path.Ext(served)]
		if !ok {
			return nil
		}
		f, err := static.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		size, err := io.Copy(h, f)
		if err != nil {
			return err
		}
		sum := h.Sum(nil)
		m[served] = &asset{name: name, size: size, gzipped: gzipped, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		panic("dashboard: reading the embedded files: " + err.Error()) // the build embeds them: cannot happen
	}
	m["/"] = m["/index.html"]
	return m
})

// Register adds the dashboard to mux: GET (and so HEAD) of / and of each
// file the page loads, by its own path, so that every other path and
// method keeps the answer the mux gives it (404, or 405 with Allow where
// another method is served).
func Register(mux *http.ServeMux) {
	for p := range assets() {
		if p == "/" {
			p = "/{$}"
		}
		mux.HandleFunc("GET "+p, serve)
	}
}

func serve(w http.ResponseWriter, r *http.Request) {
	a := assets()[r.URL.Path]
	if a == nil { // a path of the mux's own cleaning: cannot happen
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.ctype)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", contentSecurityPolicy(r.Host))
	h.Set("Referrer-Policy", "no-referrer")
	// The files change with the binary, under the same names: a browser
	// keeps them but asks each time whether they changed (304 if not).
	h.Set("Cache-Control", "no-cache")
	etag := a.etag
	if a.gzipped {
		h.Set("Vary", "Accept-Encoding")
		if acceptsGzip(r) {
			h.Set("Content-Encoding", "gzip")
		} else {
			etag = strings.TrimSuffix(etag, `"`) + `-identity"`
		}
	}
	h.Set("ETag", etag)
	if matches(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	f, err := static.Open(a.name)
	if err != nil { // embedded: cannot happen
		http.Error(w, "dashboard: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	if a.gzipped && h.Get("Content-Encoding") == "" {
		writeGunzipped(w, r, f)
		return
	}
	h.Set("Content-Length", strconv.FormatInt(a.size, 10))
	if r.Method == http.MethodGet {
		io.Copy(w, f)
	}
}

// writeGunzipped sends a gzipped file to a client that does not take
// gzip (curl without --compressed, some proxies).
func writeGunzipped(w http.ResponseWriter, r *http.Request, body io.Reader) {
	zr, err := gzip.NewReader(body)
	if err != nil {
		http.Error(w, "dashboard: a stored file is not gzip: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if r.Method == http.MethodGet {
		io.Copy(w, zr)
	}
}

// acceptsGzip reports whether the request's Accept-Encoding takes gzip
// (and does not refuse it with q=0).
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(part, ";")
		if c := strings.TrimSpace(coding); !strings.EqualFold(c, "gzip") && c != "*" {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}

// matches reports whether an If-None-Match header names etag.
func matches(ifNoneMatch, etag string) bool {
	for _, t := range strings.Split(ifNoneMatch, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == etag || t == "*" {
			return true
		}
	}
	return false
}

// contentSecurityPolicy lets the page load only its own files and talk
// only to its own origin and, for the watch panel, to WebSocket
// listeners on the same host, whatever their port. A Host with anything
// but a host name's or address's characters gets no WebSocket sources.
func contentSecurityPolicy(host string) string {
	connect := "'self'"
	if name := hostOnly(host); name != "" {
		connect += " ws://" + name + ":* wss://" + name + ":*"
	}
	return "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src " + connect +
		"; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}

// hostOnly is the host of a Host header without its port, or "" when it
// is not a plain host name or IP address.
func hostOnly(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		host = host[:i]
	}
	if host == "" || strings.Contains(host, ":") && !strings.HasPrefix(host, "[") || strings.ContainsFunc(host, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune(".-[]:", r))
	}) {
		return ""
	}
	return host
}
