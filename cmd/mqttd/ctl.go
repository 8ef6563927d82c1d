package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"mqttd"
	"mqttd/listeners"
)

// mqttd ctl: the management API (http_api.go, http_admin.go) from a
// terminal. It finds the broker through --api or MQTTD_API (https://
// with --api-ca or MQTTD_API_CA to trust a certificate no system CA
// signed), and its token in MQTTD_API_TOKEN or --token-file, or an
// admin's password (for --user or MQTTD_API_USER) in MQTTD_API_PASSWORD
// or --api-password-file, never in a flag's value, which other users of
// the machine could read in the process list.

// defaultAPI is where ctl looks for the broker: its default metrics
// address.
const defaultAPI = "http://" + defaultMetricsAddress

// ctlTimeout bounds one request: a kick waits up to a couple of seconds
// for the client to be told.
const ctlTimeout = 30 * time.Second

const ctlUsage = `Usage: mqttd ctl [--api URL] [--api-ca FILE] [--token-file FILE | --user NAME --api-password-file FILE] [--json] COMMAND

Commands:
  overview                      the broker at a glance
  clients [--search TEXT] [--offline]
                                sessions (all, matching TEXT in id or username, or offline ones)
  client ID                     one session and its subscriptions
  kick ID [--discard-session]   disconnect a client (5.0: reason 0x98), keeping its session unless asked
  sessions rm ID                delete an offline session with its queue
  retained [--payload]          retained messages (with the start of their payloads)
  retained rm TOPIC             clear a retained message
  dlq                           the dead letters kept on $DLQ/
  dlq republish TOPIC           publish a dead letter again on its original topic, and clear it
  dlq rm TOPIC                  drop a dead letter
  watch FILTER [--count N]      messages matching FILTER as the broker routes them, with their
                                publisher's client id, until interrupted (or N messages)
  top [--count N]               rates, the busiest clients and topics, refreshed every second until
                                interrupted (or N times); --json: one refresh
  reload                        what SIGHUP does: read the files and the config again
  log-level LEVEL               set the log level (trace, debug, info, warn, error) until a restart

The broker is found at --api URL, or MQTTD_API, or ` + defaultAPI + ` (its default --metrics address).
An https:// URL is verified against the system's CAs, or those of --api-ca FILE (MQTTD_API_CA).
A token (metrics.token) is read from MQTTD_API_TOKEN or --token-file FILE; or, as an admin user
(--user NAME or MQTTD_API_USER), the password from MQTTD_API_PASSWORD or --api-password-file FILE.
Tables are for people; --json prints the API's JSON. Exit status: 0 done, 1 an error
(naming the URL and the HTTP status), 2 a bad command line.

Flags:
`

// ctl is one run of mqttd ctl.
type ctl struct {
	api, token string
	// user and password are an admin's HTTP Basic credentials.
	user, password string
	json           bool
	out            io.Writer
	client         *http.Client
}

// ctlFlags are every command's flags, given before or after the command.
type ctlFlags struct {
	api, tokenFile         string
	apiCA, user, pwFile    string
	json, offline, discard bool
	payload                bool
	search                 string
	count                  int
	positional             []string
}

// runCtl runs mqttd ctl and returns the exit status.
func runCtl(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	f, err := parseCtlFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "mqttd ctl:", err)
		return 2
	}
	c := &ctl{api: f.api, json: f.json, out: stdout, client: &http.Client{Timeout: ctlTimeout}}
	if c.api == "" {
		c.api = cmp.Or(getenv("MQTTD_API"), defaultAPI)
	}
	c.api = strings.TrimSuffix(c.api, "/")
	err = c.credentials(f, getenv)
	if err == nil {
		err = c.run(f)
	}
	if err != nil {
		var u *usageError
		fmt.Fprintln(stderr, "mqttd ctl:", err)
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

// credentials sets up the client for f: the CA to trust, and the token
// or the user and password, from the environment or files.
func (c *ctl) credentials(f ctlFlags, getenv func(string) string) error {
	if ca := cmp.Or(f.apiCA, getenv("MQTTD_API_CA")); ca != "" {
		tc, err := listeners.ClientTLS(ca, "", "", "", nil, false)
		if err != nil {
			return fmt.Errorf("--api-ca: %w", err)
		}
		c.client.Transport = &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment}
	}
	var err error
	c.token, err = secret(getenv("MQTTD_API_TOKEN"), f.tokenFile, "--token-file")
	if err != nil {
		return err
	}
	c.user = cmp.Or(f.user, getenv("MQTTD_API_USER"))
	c.password, err = secret(getenv("MQTTD_API_PASSWORD"), f.pwFile, "--api-password-file")
	switch {
	case err != nil:
		return err
	case c.user == "" && c.password != "":
		return &usageError{"a password without a user: set --user or MQTTD_API_USER"}
	case c.user != "" && c.password == "":
		return &usageError{"user " + strconv.Quote(c.user) + " without a password: set MQTTD_API_PASSWORD or --api-password-file"}
	case c.user != "" && c.token != "":
		return &usageError{"both a token and a user: give one"}
	}
	return nil
}

// secret is the value of a variable, or the first line of file when one
// is given (flag names it in errors).
func secret(env, file, flag string) (string, error) {
	if file == "" {
		return strings.TrimSpace(env), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line), nil
}

// authorize adds the credentials to req.
func (c *ctl) authorize(req *http.Request) {
	switch {
	case c.token != "":
		req.Header.Set("Authorization", "Bearer "+c.token)
	case c.user != "":
		req.SetBasicAuth(c.user, c.password)
	}
}

// usageError is a bad command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg + " (see mqttd ctl help)" }

// parseCtlFlags reads the flags wherever they stand among the words.
func parseCtlFlags(args []string, stderr io.Writer) (ctlFlags, error) {
	var f ctlFlags
	fs := flag.NewFlagSet("mqttd ctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.api, "api", "", "the broker's management `URL` (env MQTTD_API; default "+defaultAPI+")")
	fs.StringVar(&f.tokenFile, "token-file", "", "read the API token from `FILE` (else env MQTTD_API_TOKEN)")
	fs.StringVar(&f.apiCA, "api-ca", "", "trust the CA certificates in `FILE` (PEM) for an https:// API, a self-signed one say (env MQTTD_API_CA)")
	fs.StringVar(&f.user, "user", "", "log in as the admin user `NAME` (env MQTTD_API_USER), its password from MQTTD_API_PASSWORD or --api-password-file")
	fs.StringVar(&f.pwFile, "api-password-file", "", "read the --user's password from the first line of `FILE` (else env MQTTD_API_PASSWORD)")
	fs.BoolVar(&f.json, "json", false, "print the API's JSON")
	fs.StringVar(&f.search, "search", "", "clients: those whose client id or username contains `TEXT`")
	fs.BoolVar(&f.offline, "offline", false, "clients: the offline sessions only")
	fs.BoolVar(&f.discard, "discard-session", false, "kick: end the session too")
	fs.BoolVar(&f.payload, "payload", false, "retained: show the start of each payload")
	fs.IntVar(&f.count, "count", 0, "watch: stop after `N` messages; top: after N refreshes (0: until interrupted)")
	fs.Usage = func() {
		fmt.Fprint(stderr, ctlUsage)
		fs.PrintDefaults()
	}
	for {
		if err := fs.Parse(args); err != nil {
			return f, err
		}
		if fs.NArg() == 0 {
			break
		}
		f.positional = append(f.positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(f.positional) == 0 || f.positional[0] == "help" {
		fs.Usage()
		if len(f.positional) == 0 {
			return f, errors.New("no command given")
		}
		return f, flag.ErrHelp
	}
	return f, nil
}

// run does the command of f.
func (c *ctl) run(f ctlFlags) error {
	words := f.positional
	one := len(words) == 1
	switch {
	case one && words[0] == "overview":
		return c.overview()
	case one && words[0] == "clients":
		q := url.Values{}
		if f.search != "" {
			q.Set("search", f.search)
		}
		if f.offline {
			q.Set("offline", "true")
		}
		return c.clients(q)
	case words[0] == "client":
		id, err := argOf(words, 1, "a client id")
		if err != nil {
			return err
		}
		return c.clientDetail(id)
	case one && words[0] == "retained":
		return c.retained(f.payload)
	case one && words[0] == "dlq":
		return c.deadLetters()
	case one && words[0] == "top":
		return c.top(f.count)
	case words[0] == "watch":
		filter, err := argOf(words, 1, "a topic filter")
		if err != nil {
			return err
		}
		return c.watch(filter, f.count)
	}
	method, path, err := actionOf(words, f.discard)
	if err != nil {
		return err
	}
	return c.act(method, path)
}

// actionOf is the request of an action's command words.
func actionOf(words []string, discard bool) (method, path string, err error) {
	const letter = "a dead letter's topic ($DLQ/REASON/TOPIC)"
	var arg string
	switch cmd := strings.Join(words[:min(len(words), 2)], " "); {
	case words[0] == "kick":
		if arg, err = argOf(words, 1, "a client id"); err == nil {
			method, path = "POST", "/api/v1/clients/"+url.PathEscape(arg)+"/disconnect"
			if discard {
				path += "?session=discard"
			}
		}
	case cmd == "sessions rm":
		if arg, err = argOf(words, 2, "a client id"); err == nil {
			method, path = "DELETE", "/api/v1/sessions/"+url.PathEscape(arg)
		}
	case cmd == "retained rm":
		if arg, err = argOf(words, 2, "a topic"); err == nil {
			method, path = "DELETE", "/api/v1/retained/"+url.PathEscape(arg)
		}
	case cmd == "dlq republish":
		if arg, err = argOf(words, 2, letter); err == nil {
			method, path = "POST", "/api/v1/deadletters/"+url.PathEscape(arg)+"/republish"
		}
	case cmd == "dlq rm":
		if arg, err = argOf(words, 2, letter); err == nil {
			method, path = "DELETE", "/api/v1/deadletters/"+url.PathEscape(arg)
		}
	case cmd == "reload":
		method, path = "POST", "/api/v1/reload"
	case words[0] == "log-level":
		if arg, err = argOf(words, 1, "a level (trace, debug, info, warn, error)"); err == nil {
			method, path = "PUT", "/api/v1/log/level?level="+url.QueryEscape(arg)
		}
	default:
		err = &usageError{fmt.Sprintf("unknown command %q", strings.Join(words, " "))}
	}
	return method, path, err
}

// argOf is the word after the first n, the last one.
func argOf(words []string, n int, what string) (string, error) {
	if len(words) != n+1 {
		return "", &usageError{fmt.Sprintf("%s: want %s", strings.Join(words[:min(len(words), n)], " "), what)}
	}
	return words[n], nil
}

// call sends a request to the API and returns its body; an answer other
// than 200 is an error naming the URL and the status, and what the API
// said.
func (c *ctl) call(method, path string) ([]byte, error) {
	u := c.api + path
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(actionHeader, "1")
	c.authorize(req)
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w%s", method, u, err, refusedHint(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %s: %w", method, u, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		why := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			why = e.Error
		}
		return nil, fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, why)
	}
	return body, nil
}

// get calls GET path and decodes the answer into v, or prints it as it
// is with --json.
func (c *ctl) get(path string, v any) (printed bool, err error) {
	body, err := c.call("GET", path)
	if err != nil {
		return false, err
	}
	if c.json {
		_, err = c.out.Write(body)
		return true, err
	}
	return false, json.Unmarshal(body, v)
}

// act calls an action and says what it did.
func (c *ctl) act(method, path string) error {
	body, err := c.call(method, path)
	if err != nil {
		return err
	}
	if c.json {
		_, err = c.out.Write(body)
		return err
	}
	var done struct {
		Done string `json:"done"`
	}
	if err := json.Unmarshal(body, &done); err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.out, done.Done)
	return err
}

// table writes rows under a header ("": none), in aligned columns.
func (c *ctl) table(header string, rows [][]string) error {
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	if header != "" {
		fmt.Fprintln(tw, header)
	}
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func (c *ctl) overview() error {
	var o mqttd.Overview
	if printed, err := c.get("/api/v1/overview", &o); printed || err != nil {
		return err
	}
	rows := [][]string{
		{"version", o.Version},
		{"up since", o.Started.Local().Format(time.DateTime) + " (" + time.Since(o.Started).Round(time.Second).String() + ")"},
		{"connections", strconv.FormatInt(o.Connections, 10)},
		{"sessions", fmt.Sprintf("%d online, %d offline", o.SessionsOnline, o.SessionsOffline)},
		{"messages", fmt.Sprintf("%.1f/s in, %.1f/s out", o.MessagesInPerSecond, o.MessagesOutPerSecond)},
		{"subscriptions", strconv.FormatInt(o.Subscriptions, 10)},
		{"retained", strconv.FormatInt(o.Retained, 10)},
		{"queued", strconv.FormatInt(o.Queued, 10)},
		{"heap", fmt.Sprintf("%.1f MiB", float64(o.HeapLive)/(1<<20))},
		{"store", o.Store},
	}
	if o.Node != "" {
		rows = append(rows, []string{"node", o.Node})
	}
	for _, l := range o.Listeners {
		rows = append(rows, []string{"listener " + l.Name, strings.TrimSpace(l.Address + " " + l.Error)})
	}
	for _, b := range o.Bridges {
		state := "disconnected"
		if b.Connected {
			state = "connected"
		}
		rows = append(rows, []string{"bridge " + b.Name, fmt.Sprintf("%s, %d queued", state, b.Queued)})
	}
	for _, reason := range slices.Sorted(maps.Keys(o.DeadLetters)) {
		rows = append(rows, []string{"dead letters " + reason, strconv.Itoa(o.DeadLetters[reason])})
	}
	return c.table("", rows)
}

// pages gets every item of the listing at path with q, following next:
// the items are under key in each page.
func pages[T any](c *ctl, path string, q url.Values, key string) ([]T, error) {
	all := []T{}
	q.Set("limit", strconv.Itoa(maxPage))
	for {
		body, err := c.call("GET", path+"?"+q.Encode())
		if err != nil {
			return nil, err
		}
		var page map[string]json.RawMessage
		var items []T
		var next string
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, fmt.Errorf("GET %s: %w", c.api+path, err)
		}
		if err := json.Unmarshal(page[key], &items); err != nil {
			return nil, fmt.Errorf("GET %s: %s: %w", c.api+path, key, err)
		}
		all = append(all, items...)
		if n, ok := page["next"]; ok {
			json.Unmarshal(n, &next)
		}
		if next == "" {
			return all, nil
		}
		q.Set("after", next)
	}
}

// printJSON prints v indented, for --json.
func (c *ctl) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *ctl) clients(q url.Values) error {
	list, err := pages[mqttd.ClientState](c, "/api/v1/clients", q, "clients")
	if err != nil || c.json {
		return cmp.Or(err, c.printJSON(map[string]any{"clients": list}))
	}
	rows := make([][]string, 0, len(list))
	for _, cl := range list {
		state := "online"
		if !cl.Connected {
			state = "offline"
			if !cl.OfflineSince.IsZero() {
				state += " " + time.Since(cl.OfflineSince).Round(time.Second).String()
			}
		}
		if cl.Node != "" { // a cluster's listing
			state += " on " + cl.Node
		}
		rows = append(rows, []string{cl.ID, cl.Username, state, cl.Remote, cl.Protocol, strconv.Itoa(cl.Subscriptions),
			strconv.Itoa(cl.Inflight), strconv.Itoa(cl.Queued)})
	}
	return c.table("CLIENT ID\tUSERNAME\tSTATE\tREMOTE\tPROTOCOL\tSUBS\tINFLIGHT\tQUEUED", rows)
}

func (c *ctl) clientDetail(id string) error {
	var d struct {
		Client        mqttd.ClientState         `json:"client"`
		Subscriptions []mqttd.SubscriptionState `json:"subscriptions"`
	}
	if printed, err := c.get("/api/v1/clients/"+url.PathEscape(id), &d); printed || err != nil {
		return err
	}
	cl := d.Client
	rows := [][]string{{"client id", cl.ID}, {"username", cl.Username}, {"connected", strconv.FormatBool(cl.Connected)},
		{"remote", cl.Remote}, {"listener", cl.Listener}, {"protocol", cl.Protocol},
		{"keepalive", strconv.Itoa(cl.KeepAlive)}, {"persistent", strconv.FormatBool(cl.Persistent)},
		{"inflight", strconv.Itoa(cl.Inflight)}, {"queued", fmt.Sprintf("%d (%d bytes)", cl.Queued, cl.QueuedBytes)}}
	if !cl.ExpiresAt.IsZero() {
		rows = append(rows, []string{"expires", cl.ExpiresAt.Local().Format(time.DateTime)})
	}
	if err := c.table("", rows); err != nil {
		return err
	}
	rows = rows[:0]
	for _, s := range d.Subscriptions {
		rows = append(rows, []string{s.Filter, strconv.Itoa(int(s.QoS))})
	}
	fmt.Fprintln(c.out)
	return c.table("SUBSCRIPTION\tQOS", rows)
}

func (c *ctl) retained(payload bool) error {
	q := url.Values{}
	if payload {
		q.Set("payload", "true")
	}
	list, err := pages[mqttd.RetainedState](c, "/api/v1/retained", q, "retained")
	if err != nil || c.json {
		return cmp.Or(err, c.printJSON(map[string]any{"retained": list}))
	}
	rows := make([][]string, 0, len(list))
	for _, r := range list {
		row := []string{r.Topic, strconv.Itoa(int(r.QoS)), strconv.Itoa(r.PayloadSize)}
		if payload {
			row = append(row, preview(r.Payload))
		}
		rows = append(rows, row)
	}
	header := "TOPIC\tQOS\tSIZE"
	if payload {
		header += "\tPAYLOAD"
	}
	return c.table(header, rows)
}

func (c *ctl) deadLetters() error {
	list, err := pages[mqttd.DeadLetterState](c, "/api/v1/deadletters", url.Values{}, "dead_letters")
	if err != nil || c.json {
		return cmp.Or(err, c.printJSON(map[string]any{"dead_letters": list}))
	}
	rows := make([][]string, 0, len(list))
	for _, l := range list {
		at := ""
		if !l.Time.IsZero() {
			at = l.Time.Local().Format(time.DateTime)
		}
		rows = append(rows, []string{l.Topic, l.Reason, l.ClientID, strconv.Itoa(l.Deliveries), at, strconv.Itoa(l.PayloadSize)})
	}
	return c.table("TOPIC\tREASON\tCLIENT ID\tDELIVERIES\tTIME\tSIZE", rows)
}

// preview shows a payload on one line: text as it is (quoted), anything
// else in hex, cut at 60 bytes.
func preview(p []byte) string {
	cut := p[:min(len(p), 60)]
	s := ""
	if utf8.Valid(cut) {
		s = strconv.Quote(string(cut))
	} else {
		s = fmt.Sprintf("%x", cut)
	}
	if len(cut) < len(p) {
		s += "..."
	}
	return s
}

// refusedHint says where ctl looked when nothing answered there: the API
// is served only on the address the broker was given for it.
func refusedHint(err error) string {
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return ""
	}
	return " (nothing listens there: mqttd serves the API on " + defaultMetricsAddress + " unless --metrics or " +
		"metrics.address in its config says another address, or off; give ctl that address with --api or MQTTD_API)"
}
