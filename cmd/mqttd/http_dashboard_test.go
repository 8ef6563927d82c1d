package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"path"
	"regexp"
	"strings"
	"testing"
	"time"

	"mqttd"
)

// fetch requests url with the headers given (Host sets the Host header)
// as a browser would, but without Go's transparent gzip, and returns the
// response with its body read.
func fetch(t *testing.T, method, url string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req := newRequest(t, method, url, "", header...)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// TestHTTPDashboard: / serves the dashboard's page, and every file the
// page and its modules load is there with its content type, no-sniff,
// the Content-Security-Policy and revalidated caching (304 for the same
// ETag); MQTT.js's bundle goes gzipped to a browser and plain to a
// client that takes no gzip; other paths keep the mux's 404, other
// methods its 405. The page is served where the
// API is refused (an exposed address without a token), since it reveals
// nothing: the API still answers 403 there.
func TestHTTPDashboard(t *testing.T) {
	b := startBroker(t, mqttd.Options{}, "main")
	base := b.serve(t, httpOptions{exposed: true})
	seen := crawlDashboard(t, base)
	for _, p := range []string{"/style.css", "/app.js", "/watch.js", "/vendor/mqtt.esm.js"} {
		if !seen[p] {
			t.Errorf("the page does not load %s (it loads %v)", p, seen)
		}
	}

	// MQTT.js's bundle, gzipped in the binary.
	gz, zipped := fetch(t, "GET", base+"/vendor/mqtt.esm.js", "Accept-Encoding", "gzip")
	plain, js := fetch(t, "GET", base+"/vendor/mqtt.esm.js")
	if gz.Header.Get("Content-Encoding") != "gzip" || gz.Header.Get("Vary") != "Accept-Encoding" ||
		plain.Header.Get("Content-Encoding") != "" || plain.StatusCode != 200 ||
		!bytes.Contains(js, []byte("export default")) || len(js) < 2*len(zipped) {
		t.Errorf("MQTT.js: gzipped %v (%d bytes), plain %d %v (%d bytes)", gz.Header, len(zipped), plain.StatusCode, plain.Header, len(js))
	}
	if gz.Header.Get("ETag") == plain.Header.Get("ETag") {
		t.Errorf("the gzipped and the plain bundle have the same ETag %s", gz.Header.Get("ETag"))
	}

	if resp, body := fetch(t, "HEAD", base+"/"); resp.StatusCode != 200 || len(body) != 0 || resp.ContentLength == 0 {
		t.Errorf("HEAD /: %d, %d bytes, Content-Length %d", resp.StatusCode, len(body), resp.ContentLength)
	}
	for _, p := range []string{"/nothing.js", "/api/v1/nothing", "/static/index.html", "/vendor/mqtt.esm.js.gz", "/vendor/"} {
		if resp, _ := fetch(t, "GET", base+p); resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
		}
	}
	if resp, _ := fetch(t, "POST", base+"/"); resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %d Allow %q, want 405 Allow GET, HEAD", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if resp, _ := fetch(t, "POST", base+"/api/v1/nothing", actionHeader, "1"); resp.StatusCode != 404 {
		t.Errorf("POST /api/v1/nothing: %d, want 404", resp.StatusCode)
	}
	if resp, body := fetch(t, "GET", base+"/api/v1/overview"); resp.StatusCode != 403 {
		t.Errorf("the API at an exposed address without a token: %d %s, want 403", resp.StatusCode, body)
	}
}

// crawlDashboard fetches / and every file it and the files it loads name
// (src and href attributes, ES module imports), checking each one's
// type and headers and that it answers 304 to its ETag; it returns the
// paths fetched.
func crawlDashboard(t *testing.T, base string) map[string]bool {
	t.Helper()
	refs := regexp.MustCompile(`(?:src|href)="([a-z][^":]*)"|from '\./([^']+)'|import\('\./([^']+)'\)`)
	seen := map[string]bool{}
	todo := []string{"/"}
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		resp, body := fetch(t, "GET", base+p, "Accept-Encoding", "gzip, deflate, br")
		if !checkAsset(t, p, resp) {
			continue
		}
		if resp.Header.Get("Content-Encoding") == "gzip" {
			body = gunzip(t, p, body)
		}
		for _, m := range refs.FindAllStringSubmatch(string(body), -1) {
			todo = append(todo, path.Join(path.Dir(p), m[1]+m[2]+m[3]))
		}
		if r2, _ := fetch(t, "GET", base+p, "If-None-Match", resp.Header.Get("ETag"), "Accept-Encoding", "gzip"); r2.StatusCode != 304 {
			t.Errorf("GET %s with its ETag: %d, want 304", p, r2.StatusCode)
		}
	}
	return seen
}

// checkAsset reports whether the answer for the dashboard's file p has
// its content type, nosniff, no-cache, an ETag and the CSP.
func checkAsset(t *testing.T, p string, resp *http.Response) bool {
	t.Helper()
	types := map[string]string{".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
		".css": "text/css; charset=utf-8"}
	want := types[path.Ext(p)]
	if p == "/" {
		want = types[".html"]
	}
	h := resp.Header
	csp := h.Get("Content-Security-Policy")
	if resp.StatusCode != 200 || h.Get("Content-Type") != want || h.Get("X-Content-Type-Options") != "nosniff" ||
		h.Get("Cache-Control") != "no-cache" || h.Get("ETag") == "" ||
		!strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self';") ||
		!strings.Contains(csp, "connect-src 'self' ws://127.0.0.1:* wss://127.0.0.1:*;") ||
		!strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("GET %s: %d, headers %v; want 200 %s, nosniff, no-cache, an ETag and the CSP", p, resp.StatusCode, h, want)
		return false
	}
	return true
}

func gunzip(t *testing.T, name string, body []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s: Content-Encoding gzip but %v", name, err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return plain
}
