package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"mqttd/auth/acl"
	"mqttd/auth/passwd"
	"mqttd/internal/fileperm"
	"mqttd/listeners"
)

// runCheckConfig is `mqttd check-config FILE`: it reads the file as the
// broker would and reports every problem with its key and line, then
// whether the files it names (passwords, ACL, certificates) load. It opens
// no port and touches no data directory.
func runCheckConfig(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: mqttd check-config FILE")
		return 2
	}
	cfg, err := loadConfig(cliFlags{config: args[0]})
	if err == nil {
		err = checkFiles(cfg)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok\n", args[0])
	return 0
}

// checkFiles loads what the configuration names besides itself, as the
// broker would at start.
func checkFiles(cfg config) error {
	var errs []error
	auths := []string{cfg.Auth.PasswordFile}
	acls := []string{cfg.Auth.ACLFile}
	for i, lc := range cfg.Listeners {
		if lc.Auth != nil {
			auths = append(auths, lc.Auth.PasswordFile)
			acls = append(acls, lc.Auth.ACLFile)
		}
		if lc.CertFile != "" && lc.KeyFile != "" {
			if _, err := tls.LoadX509KeyPair(lc.CertFile, lc.KeyFile); err != nil {
				errs = append(errs, fmt.Errorf("listeners[%d].cert_file: %w", i, err))
			}
		}
	}
	if mc := cfg.Metrics; mc.Address != "" && mc.TLS.CertFile != "" {
		tc := listeners.TLSConfig{CertFile: mc.TLS.CertFile, KeyFile: mc.TLS.KeyFile}
		if _, err := listeners.NewServerTLS(tc); err != nil {
			errs = append(errs, fmt.Errorf("metrics.tls: %w", fileperm.Explain(err, mc.TLS.CertFile)))
		}
	}
	// A file named by several listeners is checked, and reported, once.
	seen := map[string]bool{"": true}
	for _, p := range auths {
		if !seen[p] {
			seen[p] = true
			if _, err := passwd.Load(p); err != nil {
				errs = append(errs, fmt.Errorf("auth.password_file: %w", fileperm.Explain(err, p)))
			}
		}
	}
	seen = map[string]bool{"": true}
	for _, p := range acls {
		if !seen[p] {
			seen[p] = true
			if _, err := acl.ParseFile(p); err != nil {
				errs = append(errs, fmt.Errorf("auth.acl_file: %w", fileperm.Explain(err, p)))
			}
		}
	}
	return errors.Join(errs...)
}

// decodeConfig decodes a YAML config file over cfg. Every key is checked
// against the settings first, so that a problem is reported in the user's
// words (the key, its line, what was expected, a close key for a
// misspelt one) rather than in Go's types, and all of them at once.
func decodeConfig(name string, data []byte, cfg *config) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return notYAML(name, data, err)
	}
	if len(doc.Content) == 0 {
		return nil // an empty file: the defaults
	}
	if line := mosquittoLine(data); line > 0 && doc.Content[0].Kind != yaml.MappingNode {
		return mosquittoConfig(name, line)
	}
	var errs []error
	checkNode(doc.Content[0], reflect.TypeOf(cfg).Elem(), "", name, &errs)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return doc.Content[0].Decode(cfg)
}

var durationType = reflect.TypeOf(time.Duration(0))

// checkNode checks n against t, the type it decodes into; key is where n
// is in the file (limits.max_queued), "" at the top. Problems are reported
// as file:line: key: what is wrong.
func checkNode(n *yaml.Node, t reflect.Type, key, file string, errs *[]error) {
	bad := func(format string, args ...any) {
		where := key
		if where == "" {
			where = "the file"
		}
		*errs = append(*errs, fmt.Errorf("%s:%d: %s: "+format, append([]any{file, n.Line, where}, args...)...))
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value keeps the default
	}
	switch {
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			bad("want keys under it (key: value lines, indented), got %s", describe(n))
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			sub := joinKey(key, k.Value)
			ft, ok := fields[k.Value]
			if !ok {
				msg := fmt.Sprintf("%s:%d: %s: unknown setting", file, k.Line, sub)
				if near := closest(k.Value, fields); near != "" {
					msg += fmt.Sprintf(" (did you mean %s?)", joinKey(key, near))
				}
				*errs = append(*errs, errors.New(msg))
				continue
			}
			checkNode(v, ft, sub, file, errs)
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			bad("want a list (lines starting with -, or [a, b]), got %s", describe(n))
			return
		}
		for i, e := range n.Content {
			checkNode(e, t.Elem(), fmt.Sprintf("%s[%d]", key, i), file, errs)
		}
	default:
		if n.Kind != yaml.ScalarNode {
			bad("want %s, got %s", want(t), describe(n))
			return
		}
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			bad("want %s, got %q", want(t), n.Value)
		}
	}
}

// yamlFields maps the YAML keys of struct t to their types, with the
// fields of inline structs among them; fields YAML skips are left out.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		switch {
		case tag == "-" || !f.IsExported():
		case strings.Contains(opts, "inline"):
			for k, v := range yamlFields(f.Type) {
				fields[k] = v
			}
		case name != "":
			fields[name] = f.Type
		default:
			fields[strings.ToLower(f.Name)] = f.Type
		}
	}
	return fields
}

// want says what a value of type t looks like, in the user's words.
func want(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration like 10s, 1m30s or 2h"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "a whole number"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "a number"
	}
	return "a text value"
}

// describe names what a node holds, for an error.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "keys"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

func joinKey(parent, k string) string {
	if parent == "" {
		return k
	}
	return parent + "." + k
}

// closest returns the key of fields nearest to k, if it is near enough to
// be a slip: at most a third of its letters off.
func closest(k string, fields map[string]reflect.Type) string {
	best, bestD := "", len(k)/3+1
	for f := range fields {
		if d := editDistance(strings.ToLower(k), f); d < bestD || d == bestD && f < best {
			best, bestD = f, d
		}
	}
	return best
}

// editDistance is the number of letters to insert, delete, replace or
// swap with the next one (levle for level is one slip, not two) to make
// a into b: the optimal string alignment distance.
func editDistance(a, b string) int {
	// Rows i-2, i-1 and i of the table.
	before := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], before[j-2]+1)
			}
		}
		before, prev, cur = prev, cur, before
	}
	return prev[len(b)]
}

// withLines prefixes each of err's problems that names a key of the
// config file (bridges[0].topics[1].direction: ...) with the file and the
// line of that key, or of the nearest enclosing one the file has (a rule
// missing its direction: the rule's line); not those whose value came
// from elsewhere (byFlag).
func withLines(file string, data []byte, err error, byFlag func(key string) bool) error {
	var doc yaml.Node
	if err == nil || file == "" || yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return err
	}
	each := flatten(err)
	out := make([]error, len(each))
	for i, e := range each {
		out[i] = e
		key, _, ok := strings.Cut(e.Error(), ": ")
		if !ok || strings.ContainsAny(key, " \t") || byFlag(key) {
			continue
		}
		if line := lineOf(doc.Content[0], key); line > 0 {
			out[i] = fmt.Errorf("%s:%d: %w", file, line, e)
		}
	}
	return errors.Join(out...)
}

// flatten lists the problems of err, joined (errors.Join) at any depth.
func flatten(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, flatten(e)...)
	}
	return out
}

// lineOf is the line of key (a.b[2].c) under n, or of the deepest part of
// it the file has; 0 when not even its first part is there.
func lineOf(n *yaml.Node, key string) int {
	line := 0
	for _, part := range strings.Split(key, ".") {
		name, index, _ := strings.Cut(part, "[")
		if n.Kind != yaml.MappingNode {
			return line
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == name {
				next, line = n.Content[i+1], n.Content[i].Line
				break
			}
		}
		if next == nil {
			return line
		}
		n = next
		if index != "" {
			i, err := strconv.Atoi(strings.TrimSuffix(index, "]"))
			if err != nil || n.Kind != yaml.SequenceNode || i < 0 || i >= len(n.Content) {
				return line
			}
			n, line = n.Content[i], n.Content[i].Line
		}
	}
	return line
}
