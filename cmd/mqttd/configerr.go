package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Explaining a config file that does not parse as YAML: the line at
// fault, and a Mosquitto config given in place of mqttd's.

// maxSearchLines bounds the lines notYAML parses again to find the line
// at fault; a longer file keeps the parser's line.
const maxSearchLines = 2000

// yamlLine is the "yaml: line N: " the parser puts before its message.
var yamlLine = regexp.MustCompile(`^yaml: line \d+: `)

// notYAML is the error for a file that does not parse, err being the
// parser's. The parser gives the line where the enclosing block began (a
// misindented key on line 3 is "line 1"), so the line given is instead
// the first one that no prefix of the file parses without: the last
// prefix that parses ends just before it.
func notYAML(name string, data []byte, err error) error {
	if mosq := mosquittoLine(data); mosq > 0 {
		return mosquittoConfig(name, mosq)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	msg := yamlLine.ReplaceAllString(err.Error(), "")
	if len(lines) > maxSearchLines {
		return fmt.Errorf("%s: not YAML: %w", name, err)
	}
	at := 1
	for n := len(lines) - 1; n > 0; n-- {
		var doc yaml.Node
		if yaml.Unmarshal(bytes.Join(lines[:n], nil), &doc) == nil {
			at = n + 1
			break
		}
	}
	hint := "check this line's indentation against the lines above: a key's settings are indented under it, all by the same number of spaces"
	if at <= len(lines) && bytes.HasPrefix(bytes.TrimLeft(lines[at-1], " "), []byte("\t")) {
		hint = "YAML indents with spaces, not tabs"
	}
	return fmt.Errorf("%s:%d: not YAML: %s (%s)", name, at, msg, hint)
}

// mosquittoLine is the number of the first line of data that is not a
// comment or blank when it starts with an option of Mosquitto's config
// (listener 1883, allow_anonymous true), 0 otherwise. mqttd's keys end in
// a colon, so a YAML file never matches.
func mosquittoLine(data []byte) int {
	for n, l := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(l)
		if t == "" || t[0] == '#' {
			continue
		}
		key := strings.Fields(t)[0]
		_, b := bridgeOptions[key]
		_, li := listenerOptions[key]
		_, g := globalOptions[key]
		if b || li || g || key == "include_dir" {
			return n + 1
		}
		return 0
	}
	return 0
}

// mosquittoConfig is the error for a Mosquitto config file given where
// mqttd's is read.
func mosquittoConfig(name string, line int) error {
	return fmt.Errorf("%s:%d: this looks like a Mosquitto config file (mosquitto.conf), not mqttd's YAML; "+
		"convert it with `mqttd import %s > mqttd.yaml` and use mqttd.yaml", name, line, name)
}
