package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
)

// watch prints the messages of GET /api/v1/watch until interrupted, the
// stream ends, or count messages (0: no bound) have come.
func (c *ctl) watch(filter string, count int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	u := c.api + "/api/v1/watch?filter=" + url.QueryEscape(filter)
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	c.authorize(req)
	// No timeout: the stream lasts as long as the watch.
	resp, err := (&http.Client{Transport: c.client.Transport}).Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w%s", u, err, refusedHint(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, e.Error)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for n := 0; count == 0 || n < count; {
		if !sc.Scan() {
			if ctx.Err() != nil {
				return nil // interrupted
			}
			if err := sc.Err(); err != nil {
				return fmt.Errorf("GET %s: %w", u, err)
			}
			return nil // the broker ended the stream
		}
		var l watchLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("GET %s: a line that is not JSON: %w", u, err)
		}
		if l.Topic == "" && l.Dropped == 0 {
			continue // the first line, sent as the watch starts
		}
		if err := c.watchLine(sc.Bytes(), l); err != nil {
			return err
		}
		if l.Topic != "" {
			n++
		}
	}
	return nil
}

// watchLine prints one line of a watch: as it came with --json, else
// the topic, QoS, retain flag, publisher and payload on one line.
func (c *ctl) watchLine(raw []byte, l watchLine) error {
	if c.json {
		_, err := fmt.Fprintf(c.out, "%s\n", raw)
		return err
	}
	if l.Dropped > 0 {
		_, err := fmt.Fprintf(c.out, "(%d messages dropped: this watch read too slowly)\n", l.Dropped)
		return err
	}
	retain := ""
	if l.Retain {
		retain = " retain"
	}
	from := l.From
	if from == "" {
		from = "(broker)"
	}
	payload := l.Payload
	if l.PayloadBase64 != nil {
		payload = preview(l.PayloadBase64)
	}
	_, err := fmt.Fprintf(c.out, "%s qos=%d%s from=%s %s\n", l.Topic, l.QoS, retain, from, payload)
	return err
}
