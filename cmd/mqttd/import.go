package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Exit codes of `mqttd import`.
const (
	importOK = 0
	// importFailed: the file could not be read, or the translation does
	// not pass mqttd's checks.
	importFailed = 1
	importUsage  = 2
	// importLeftOut: the YAML was printed, but some options were not
	// translated (each is named on standard error).
	importLeftOut = 3
)

// runImport is `mqttd import FILE`: it reads a Mosquitto configuration
// file (and the files of its include_dir) and prints the equivalent mqttd
// YAML configuration on stdout. Every option it does not translate is
// named on stderr with its file and line and why.
func runImport(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "usage: mqttd import mosquitto.conf > mqttd.yaml")
		fmt.Fprintln(stderr, "Prints the mqttd configuration equivalent to a Mosquitto one; exits 3 when some option was left out (each is named here).")
		return importUsage
	}
	imp := newImporter()
	if err := imp.readFile(args[0], 0); err != nil {
		fmt.Fprintln(stderr, "mqttd import:", err)
		return importFailed
	}
	cfg := imp.finish(args[0])
	out, err := encodeImport(cfg, imp.header(args[0]))
	if err == nil {
		err = checkImported(out)
	}
	for _, f := range imp.findings {
		fmt.Fprintln(stderr, f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "mqttd import: the translation does not pass mqttd's checks (please report this):\n%v\n", err)
		return importFailed
	}
	stdout.Write(out)
	if imp.leftOut() > 0 {
		fmt.Fprintf(stderr, "mqttd import: %d option(s) not translated; see above\n", imp.leftOut())
		return importLeftOut
	}
	return importOK
}

// checkImported decodes the YAML as the broker would and validates it.
// The files it names are not opened: the import may run on another
// machine than the broker.
func checkImported(out []byte) error {
	cfg := defaults()
	if err := decodeConfig("the translation", out, &cfg); err != nil {
		return err
	}
	return cfg.Options.Validate()
}

// line is one option of a Mosquitto configuration file.
type line struct {
	file string
	num  int
	key  string
	// rest is everything after the key, trimmed: a string value (a path
	// may hold spaces, as Mosquitto reads it).
	rest string
	// fields are rest split on blanks.
	fields []string
}

func (l line) String() string { return fmt.Sprintf("%s:%d", l.file, l.num) }

// args are the fields before the first that starts a comment, as
// Mosquitto reads options of several words.
func (l line) args() []string {
	for i, f := range l.fields {
		if strings.HasPrefix(f, "#") {
			return l.fields[:i]
		}
	}
	return l.fields
}

// finding is what the import says about one option.
type finding struct {
	at  line
	msg string
	// left is true when the option's effect is not in the output.
	left bool
}

func (f finding) String() string {
	if f.at.num == 0 { // about the file as a whole
		return fmt.Sprintf("%s: %s: %s", f.at.file, f.at.key, f.msg)
	}
	return fmt.Sprintf("%s: %s: %s", f.at, f.at.key, f.msg)
}

// Kinds of finding, as they start the message.
const (
	unsupported = "not supported by mqttd"
	differently = "mqttd does this differently: "
	notNeeded   = "not needed: "
	noteKind    = "note: "
)

// readFile reads one configuration file; level 0 is the main file, whose
// include_dir lines are followed (Mosquitto follows no others).
func (imp *importer) readFile(name string, level int) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	imp.sources = append(imp.sources, name)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for num := 1; sc.Scan(); num++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		l := line{file: name, num: num, key: fields[0], fields: fields[1:],
			rest: strings.TrimSpace(strings.TrimPrefix(text, fields[0]))}
		if l.key == "include_dir" {
			if err := imp.includeDir(l, level); err != nil {
				return err
			}
			continue
		}
		imp.option(l)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// includeDir reads the .conf files of the directory, in Mosquitto's order.
func (imp *importer) includeDir(l line, level int) error {
	if level > 0 {
		imp.note(l, "Mosquitto follows include_dir only in the main file; so does mqttd import")
		return nil
	}
	if l.rest == "" {
		imp.bad(l, "no directory given")
		return nil
	}
	entries, err := os.ReadDir(l.rest)
	if err != nil {
		return fmt.Errorf("%s: include_dir: %w", l, err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".conf") && !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	slices.SortFunc(names, mosquittoOrder)
	for _, n := range names {
		if err := imp.readFile(filepath.Join(l.rest, n), level+1); err != nil {
			return err
		}
	}
	return nil
}

// mosquittoOrder sorts file names as Mosquitto loads them: alphabetically,
// the upper case of each letter before its lower case (A.conf, a.conf,
// B.conf).
func mosquittoOrder(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	for i := 0; i < len(ra) && i < len(rb); i++ {
		la, lb := unicode.ToLower(ra[i]), unicode.ToLower(rb[i])
		if la != lb {
			return int(la) - int(lb)
		}
		if ra[i] != rb[i] {
			return int(ra[i]) - int(rb[i]) // upper case first
		}
	}
	return len(ra) - len(rb)
}

func (imp *importer) add(l line, msg string, left bool) {
	imp.findings = append(imp.findings, finding{at: l, msg: msg, left: left})
}

// named reports an option left out, with why.
func (imp *importer) named(l line, why string) { imp.add(l, why, true) }

// bad reports a line Mosquitto itself would refuse; it is left out.
func (imp *importer) bad(l line, format string, args ...any) {
	imp.add(l, "bad line: "+fmt.Sprintf(format, args...), true)
}

// note says something about an option that was translated, or that
// mqttd does without.
func (imp *importer) note(l line, msg string) { imp.add(l, noteKind+msg, false) }

func (imp *importer) leftOut() int {
	n := 0
	for _, f := range imp.findings {
		if f.left {
			n++
		}
	}
	return n
}

// one returns the option's single value.
func (imp *importer) one(l line) (string, bool) {
	a := l.args()
	if len(a) != 1 {
		imp.bad(l, "want one value, got %d", len(a))
		return "", false
	}
	return a[0], true
}

// str returns a string value: the rest of the line.
func (imp *importer) str(l line) (string, bool) {
	if l.rest == "" {
		imp.bad(l, "no value")
		return "", false
	}
	return l.rest, true
}

// boolean reads true/false (or 1/0, as Mosquitto does).
func (imp *importer) boolean(l line) (v, ok bool) {
	s, ok := imp.one(l)
	if !ok {
		return false, false
	}
	switch s {
	case "true", "1":
		return true, true
	case "false", "0":
		return false, true
	}
	imp.bad(l, "%q: want true or false", s)
	return false, false
}

// integer reads a whole number between lo and hi.
func (imp *importer) integer(l line, lo, hi int64) (int64, bool) {
	s, ok := imp.one(l)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		imp.bad(l, "%q: want a whole number from %d to %d", s, lo, hi)
		return 0, false
	}
	return n, true
}

// onlyDefault accepts a boolean option at the value mqttd always behaves
// as (mostly Mosquitto's default) and names the other value with why.
func (imp *importer) onlyDefault(l line, mqttdValue bool, why string) {
	if v, ok := imp.boolean(l); ok && v != mqttdValue {
		imp.named(l, why)
	}
}

// header is the comment on top of the output.
func (imp *importer) header(main string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mqttd configuration translated by `mqttd import` from %s", main)
	if len(imp.sources) > 1 {
		fmt.Fprintf(&b, " and %s", strings.Join(imp.sources[1:], ", "))
	}
	b.WriteString(".\nOnly what differs from mqttd's defaults is set; see mqttd.example.yaml for the rest.\nCheck it with: mqttd check-config FILE")
	if n := imp.leftOut(); n > 0 {
		fmt.Fprintf(&b, "\n\nNot translated (%d):", n)
		for _, f := range imp.findings {
			if f.left {
				b.WriteString("\n  " + f.String())
			}
		}
	}
	return b.String()
}
