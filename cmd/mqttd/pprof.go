package main

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"
)

// The profiles under /debug/pprof/ (metrics.pprof), served from
// runtime/pprof and runtime/trace as net/http/pprof serves them, with the
// same paths and parameters for go tool pprof and go tool trace, but no
// ?seconds= on the named profiles: net/http/pprof computes those deltas
// with a profile parser that made a fifth of a megabyte of the binary.

// pprofRoutes registers the handlers on mux, each behind g.
func pprofRoutes(mux *http.ServeMux, g *guard) {
	mux.Handle("/debug/pprof/", g.wrap(pprofNamed))
	mux.Handle("/debug/pprof/cmdline", g.wrap(pprofCmdline))
	mux.Handle("/debug/pprof/profile", g.wrap(pprofCPU))
	mux.Handle("/debug/pprof/symbol", g.wrap(pprofSymbol))
	mux.Handle("/debug/pprof/trace", g.wrap(pprofTrace))
}

// pprofNamed serves /debug/pprof/NAME (heap, goroutine, allocs, block,
// mutex, threadcreate) with ?debug=N (0: the gzipped protobuf go tool
// pprof reads; 1 and 2: text) and, for the heap, ?gc=1 (a collection
// first); /debug/pprof/ itself lists them.
func pprofNamed(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/")
	if name == "" {
		pprofIndex(w)
		return
	}
	q := r.URL.Query()
	w.Header().Set("X-Content-Type-Options", "nosniff")
	p := pprof.Lookup(name)
	if p == nil {
		pprofError(w, http.StatusNotFound, "unknown profile "+name)
		return
	}
	if q.Has("seconds") {
		pprofError(w, http.StatusBadRequest, "?seconds= is taken by profile and trace only; "+name+" is a snapshot")
		return
	}
	debug, _ := strconv.Atoi(q.Get("debug"))
	if gc, _ := strconv.Atoi(q.Get("gc")); name == "heap" && gc > 0 {
		runtime.GC()
	}
	if debug == 0 {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	} else {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	_ = p.WriteTo(w, debug)
}

// pprofIndex lists the profiles, each with its count, and the other paths.
func pprofIndex(w http.ResponseWriter) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	io.WriteString(w, "<!DOCTYPE html>\n<html><head><title>/debug/pprof/</title></head><body>\n<p>Profiles (?debug=1 for text):</p>\n<table>\n")
	for _, p := range pprof.Profiles() {
		n := html.EscapeString(p.Name())
		fmt.Fprintf(w, "<tr><td>%d</td><td><a href=\"%s?debug=1\">%s</a></td></tr>\n", p.Count(), n, n)
	}
	io.WriteString(w, "</table>\n<p><a href=\"profile\">profile</a> (CPU, ?seconds=30), "+
		"<a href=\"trace?seconds=1\">trace</a> (?seconds=1), <a href=\"cmdline\">cmdline</a>, <a href=\"symbol\">symbol</a></p>\n</body></html>\n")
}

// pprofCmdline answers the command line, its arguments separated by NUL.
func pprofCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, strings.Join(os.Args, "\x00"))
}

// pprofCPU samples the CPU for ?seconds= (30 by default) and answers
// the profile.
var pprofCPU = pprofRecording("profile", 30, pprof.StartCPUProfile, pprof.StopCPUProfile)

// pprofTrace records the execution trace for ?seconds= (1 by default)
// and answers it.
var pprofTrace = pprofRecording("trace", 1, trace.Start, trace.Stop)

// pprofRecording serves a recording made between start and stop over
// ?seconds= (def when absent or not a positive number), as file name.
func pprofRecording(name string, def float64, start func(io.Writer) error, stop func()) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sec, err := strconv.ParseFloat(r.URL.Query().Get("seconds"), 64)
		if err != nil || !(sec > 0) {
			sec = def
		}
		d, ok := pprofDuration(w, sec)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
		if err := start(w); err != nil {
			pprofError(w, http.StatusInternalServerError, "could not start the "+name+": "+err.Error())
			return
		}
		pprofSleep(r, d)
		stop()
	}
}

// pprofDuration is sec as a duration, or answers 400 when the response
// could not be written within the server's write timeout after it.
func pprofDuration(w http.ResponseWriter, sec float64) (time.Duration, bool) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if sec >= httpWriteTimeout.Seconds() {
		pprofError(w, http.StatusBadRequest, fmt.Sprintf("?seconds= must be under %v, the server's write timeout", httpWriteTimeout))
		return 0, false
	}
	return time.Duration(sec * float64(time.Second)), true
}

// pprofSleep waits d, or until the client goes.
func pprofSleep(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}

// pprofSymbol answers the function at each program counter asked for
// (hexadecimal, separated by '+', in a POST's body or after the '?' of
// a GET), as pprof's remote symbolization asks; a GET without any says
// that symbols are served.
func pprofSymbol(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var b strings.Builder
	b.WriteString("num_symbols: 1\n")
	list := r.URL.RawQuery
	if r.Method == http.MethodPost {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		list = string(body)
	}
	for word := range strings.SplitSeq(list, "+") {
		pc, err := strconv.ParseUint(word, 0, 64)
		if err != nil || pc == 0 {
			continue
		}
		if f := runtime.FuncForPC(uintptr(pc)); f != nil {
			fmt.Fprintf(&b, "%#x %s\n", pc, f.Name())
		}
	}
	io.WriteString(w, b.String())
}

// pprofError answers a plain text error, without the headers set for a
// profile.
func pprofError(w http.ResponseWriter, code int, why string) {
	h := w.Header()
	h.Del("Content-Disposition")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintln(w, why)
}
