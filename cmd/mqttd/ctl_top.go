package main

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"mqttd"
)

// mqttd ctl top: the broker's rates, its busiest clients and topics,
// refreshed every second. A client's rates are the growth of its bytes
// between two refreshes (the API keeps no rates per client); a topic's
// come from /api/v1/topics, which the first refresh switches on.

// topRows is how many clients and topics a refresh shows.
const topRows = 10

// topEvery is the time between refreshes.
const topEvery = time.Second

// topPages bounds the pages of sessions a refresh reads: each page costs
// the broker a look at every session (README, "Pages"), so a broker with
// many has its busiest clients looked for among the first topPages*maxPage.
const topPages = 5

// topView is one refresh, and what --json prints.
type topView struct {
	At       time.Time      `json:"at"`
	Overview mqttd.Overview `json:"overview"`
	Clients  []topClient    `json:"clients"`
	// More is set when the sessions past the first topPages pages were
	// not looked at.
	More   bool              `json:"more_clients,omitempty"`
	Topics mqttd.TopicCounts `json:"topics"`
}

// topClient is a connected client's traffic: its bytes since it
// connected, and a second since the previous refresh (none at the first).
type topClient struct {
	ID           string   `json:"id"`
	BytesIn      uint64   `json:"bytes_in"`
	BytesOut     uint64   `json:"bytes_out"`
	InPerSecond  *float64 `json:"bytes_in_per_second,omitempty"`
	OutPerSecond *float64 `json:"bytes_out_per_second,omitempty"`
	Queued       int      `json:"queued"`
	Inflight     int      `json:"inflight"`
	busy         float64  // what the order is by
}

// top shows a refresh every topEvery until interrupted, or count
// refreshes (0: no bound); with --json, one refresh.
func (c *ctl) top(count int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.json {
		count = 1
	}
	ansi := isTerminal(c.out)
	var prev *topView
	tick := time.NewTicker(topEvery)
	defer tick.Stop()
	for n := 0; count == 0 || n < count; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		v, err := c.topView(prev)
		if err != nil {
			return err
		}
		if c.json {
			return c.printJSON(v)
		}
		if ansi {
			fmt.Fprint(c.out, "\x1b[H\x1b[2J")
		} else if n > 0 {
			fmt.Fprintln(c.out)
		}
		if err := c.showTop(v); err != nil {
			return err
		}
		prev = v
	}
	return nil
}

// topView reads the broker now; prev is the previous refresh (nil: none).
func (c *ctl) topView(prev *topView) (*topView, error) {
	v := &topView{At: time.Now()}
	if _, err := c.getQuiet("/api/v1/overview", &v.Overview); err != nil {
		return nil, err
	}
	list, err := c.sessionsUpTo(topPages, maxPage, &v.More)
	if err != nil {
		return nil, err
	}
	if _, err := c.getQuiet("/api/v1/topics?limit="+strconv.Itoa(topRows), &v.Topics); err != nil {
		return nil, err
	}
	before := map[string]topClient{}
	var seconds float64
	if prev != nil {
		seconds = v.At.Sub(prev.At).Seconds()
		for _, cl := range prev.Clients {
			before[cl.ID] = cl
		}
	}
	for _, cl := range list {
		if !cl.Connected {
			continue
		}
		t := topClient{ID: cl.ID, BytesIn: cl.BytesIn, BytesOut: cl.BytesOut, Queued: cl.Queued, Inflight: cl.Inflight}
		t.busy = float64(cl.BytesIn + cl.BytesOut)
		if b, ok := before[cl.ID]; ok && seconds > 0 {
			// A client that connected again since counts from zero.
			in := float64(cl.BytesIn-min(b.BytesIn, cl.BytesIn)) / seconds
			out := float64(cl.BytesOut-min(b.BytesOut, cl.BytesOut)) / seconds
			t.InPerSecond, t.OutPerSecond, t.busy = &in, &out, in+out
		}
		v.Clients = append(v.Clients, t)
	}
	slices.SortFunc(v.Clients, func(a, b topClient) int {
		return cmp.Or(cmp.Compare(b.busy, a.busy), strings.Compare(a.ID, b.ID))
	})
	return v, nil
}

// sessionsUpTo reads at most n pages of size sessions; more says
// whether there were more.
func (c *ctl) sessionsUpTo(n, size int, more *bool) ([]mqttd.ClientState, error) {
	var all []mqttd.ClientState
	q := url.Values{"limit": {strconv.Itoa(size)}}
	for range n {
		var page struct {
			Clients []mqttd.ClientState `json:"clients"`
			Next    string              `json:"next"`
		}
		if _, err := c.getQuiet("/api/v1/clients?"+q.Encode(), &page); err != nil {
			return nil, err
		}
		all = append(all, page.Clients...)
		if *more = page.Next != ""; !*more {
			break
		}
		q.Set("after", page.Next)
	}
	return all, nil
}

// getQuiet is get without --json's printing.
func (c *ctl) getQuiet(path string, v any) (bool, error) {
	was := c.json
	c.json = false
	defer func() { c.json = was }()
	return c.get(path, v)
}

// showTop prints a refresh for a person.
func (c *ctl) showTop(v *topView) error {
	o := v.Overview
	fmt.Fprintf(c.out, "mqttd %s  %s  up %s\n", o.Version, v.At.Format(time.TimeOnly),
		v.At.Sub(o.Started).Round(time.Second))
	fmt.Fprintf(c.out, "messages %.1f/s in, %.1f/s out  connections %d  sessions %d online, %d offline  queued %d\n\n",
		o.MessagesInPerSecond, o.MessagesOutPerSecond, o.Connections, o.SessionsOnline, o.SessionsOffline, o.Queued)
	rows := [][]string{}
	for _, cl := range v.Clients[:min(len(v.Clients), topRows)] {
		in, out := "-", "-"
		if cl.InPerSecond != nil {
			in, out = bytesPerSecond(*cl.InPerSecond), bytesPerSecond(*cl.OutPerSecond)
		}
		rows = append(rows, []string{cl.ID, in, out, strconv.FormatUint(cl.BytesIn, 10), strconv.FormatUint(cl.BytesOut, 10),
			strconv.Itoa(cl.Inflight), strconv.Itoa(cl.Queued)})
	}
	if err := c.table("CLIENT ID\tIN/S\tOUT/S\tBYTES IN\tBYTES OUT\tINFLIGHT\tQUEUED", rows); err != nil {
		return err
	}
	if v.More {
		fmt.Fprintf(c.out, "(the busiest of the first %d sessions by client id)\n", topPages*maxPage)
	}
	fmt.Fprintln(c.out)
	rows = rows[:0]
	for _, t := range v.Topics.Topics {
		rows = append(rows, []string{t.Topic, fmt.Sprintf("%.1f", t.Rate), strconv.FormatUint(t.Messages, 10)})
	}
	window := fmt.Sprintf("MSGS/S (%.0f s)", v.Topics.WindowSeconds)
	return c.table("TOPIC\t"+window+"\tMESSAGES", rows)
}

// bytesPerSecond is a rate of bytes for a person.
func bytesPerSecond(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
