package main

import (
	"bytes"
	"cmp"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"mqttd"
	"mqttd/bridge"
)

// finish builds the mqttd configuration from what was read.
func (imp *importer) finish(main string) config {
	imp.finishLog()
	imp.finishSizes(main)
	cfg := imp.cfg
	var mls []*mosqListener
	if imp.def != nil {
		mls = append(mls, imp.def)
	}
	mls = append(mls, imp.listeners...)
	for _, ml := range mls {
		if lc, ok := imp.listenerConfig(ml); ok {
			cfg.Listeners = append(cfg.Listeners, lc)
		}
	}
	if len(mls) == 0 {
		// Mosquitto 2 without a listener listens on loopback only.
		cfg.Listeners = []mqttd.ListenerConfig{{Type: "tcp", Address: mqttd.DefaultAddress}}
	}
	if !imp.perListener {
		cfg.Auth.AuthConfig = imp.global.config(imp.networked)
	}
	imp.finishClosed(&cfg, main)
	dropDefaultLimits(&cfg.Limits)
	for _, mb := range imp.bridges {
		if c, ok := imp.bridgeConfig(mb); ok {
			cfg.Bridges = append(cfg.Bridges, dropBridgeDefaults(c))
		}
	}
	imp.sortFindings()
	return cfg
}

// finishClosed keeps listeners that let nobody in as Mosquitto has them
// (no password file, anonymous clients refused: Mosquitto 2 refuses every
// client there), with allow_closed, which mqttd requires for them, and
// says so.
func (imp *importer) finishClosed(cfg *config, main string) {
	closed := cfg.Options.ClosedListeners()
	if len(closed) == 0 {
		return
	}
	cfg.Auth.AllowClosed = true
	var which []string
	for _, i := range closed {
		which = append(which, listenArg(cfg.Listeners[i]))
	}
	imp.note(line{file: main, key: "password_file"}, "no client can log in to "+strings.Join(which, ", ")+
		" (no password_file, anonymous clients refused), as in Mosquitto: kept with auth.allow_closed: true; "+
		"to let users in, set auth.password_file (mqttd passwd -c FILE USER makes one)")
}

// sortFindings puts the findings in the order of the files and lines they
// are about; those about the configuration as a whole come last.
func (imp *importer) sortFindings() {
	order := map[string]int{}
	for i, s := range imp.sources {
		order[s] = i
	}
	whole := func(f finding) int {
		if f.at.num == 0 {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(imp.findings, func(a, b finding) int {
		return cmp.Or(cmp.Compare(whole(a), whole(b)), cmp.Compare(order[a.at.file], order[b.at.file]), cmp.Compare(a.at.num, b.at.num))
	})
}

// dropDefaultLimits zeroes the limits set to mqttd's own default, so that
// the output leaves them out. Those whose default comes from the memory
// are kept: the broker's machine may have another.
func dropDefaultLimits(l *mqttd.Limits) {
	small := mqttd.Options{Limits: mqttd.Limits{MaxMemory: 64 << 20}}.WithDefaults().Limits
	large := mqttd.Options{Limits: mqttd.Limits{MaxMemory: 512 << 20}}.WithDefaults().Limits
	v, sv, lv := reflect.ValueOf(l).Elem(), reflect.ValueOf(small), reflect.ValueOf(large)
	for i := range v.NumField() {
		if f := v.Field(i); f.Equal(sv.Field(i)) && f.Equal(lv.Field(i)) {
			f.SetZero()
		}
	}
}

// dropBridgeDefaults leaves out of c what is mqttd's default anyway.
func dropBridgeDefaults(c bridge.Config) bridge.Config {
	for _, f := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.KeepAlive, bridge.DefaultKeepAlive}, {&c.ReconnectMin, bridge.DefaultReconnectMin},
		{&c.ReconnectMax, bridge.DefaultReconnectMax}} {
		if *f.v == f.def {
			*f.v = 0
		}
	}
	if c.MaxQueuedMessages == bridge.DefaultMaxQueuedMessages {
		c.MaxQueuedMessages = 0
	}
	return c
}

// encodeImport writes cfg as YAML under a comment.
func encodeImport(cfg config, comment string) ([]byte, error) {
	var lines []string
	for _, l := range strings.Split(comment, "\n") {
		lines = append(lines, strings.TrimRight("# "+l, " "))
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, HeadComment: strings.Join(lines, "\n"),
		Content: []*yaml.Node{valueNode(reflect.ValueOf(cfg))}}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// valueNode is v as YAML with the zero fields of structs, which mean
// mqttd's defaults, left out; nil when nothing is left. A pointer is
// written even to a zero value (qos: 0, allow_anonymous: false). The
// bridge's password is written as it is: it came from the same place.
func valueNode(v reflect.Value) *yaml.Node {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		if v.Elem().Kind() == reflect.Struct {
			return structNode(v.Elem())
		}
		return scalarNode(v.Elem())
	case reflect.Struct:
		return structNode(v)
	case reflect.Slice:
		if v.Len() == 0 {
			return nil
		}
		seq := &yaml.Node{Kind: yaml.SequenceNode}
		for i := range v.Len() {
			e := valueNode(v.Index(i))
			if e == nil {
				e = scalarNode(v.Index(i))
			}
			seq.Content = append(seq.Content, e)
		}
		return seq
	}
	if v.IsZero() {
		return nil
	}
	return scalarNode(v)
}

// structNode maps the YAML keys of struct v to their values, the fields
// of inline structs among them, as decodeConfig reads them.
func structNode(v reflect.Value) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if !f.IsExported() || tag == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			if c := structNode(v.Field(i)); c != nil {
				m.Content = append(m.Content, c.Content...)
			}
			continue
		}
		c := valueNode(v.Field(i))
		if c == nil {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name}, c)
	}
	if len(m.Content) == 0 {
		return nil
	}
	return m
}

// scalarNode is a number, a boolean, a duration or a string; the encoder
// quotes a string that would read as something else.
func scalarNode(v reflect.Value) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str"}
	switch {
	case v.Type() == durationType:
		n.Value = shortDuration(time.Duration(v.Int()))
	case v.Kind() == reflect.Bool:
		n.Tag, n.Value = "!!bool", strconv.FormatBool(v.Bool())
	case v.CanInt():
		n.Tag, n.Value = "!!int", strconv.FormatInt(v.Int(), 10)
	case v.CanUint():
		n.Tag, n.Value = "!!int", strconv.FormatUint(v.Uint(), 10)
	default:
		n.Value = v.String() // a Secret's too: its String method is not called
	}
	return n
}

// shortDuration is d as people write it: 24h rather than 24h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
