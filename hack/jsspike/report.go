package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

func report(w io.Writer, cfg config, res *results) {
	if res == nil {
		return
	}
	fmt.Fprintf(w, "3 nodes in one process on 127.0.0.1, streams R3 on files; %d-byte entries; %d sessions × %d queued\n\n",
		cfg.size, cfg.sessions, cfg.queued)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\tmsgs\tcommits\tmsg/s\tcommits/s\tp50 µs\tp99 µs\tnote")
	var rows []row
	rows = append(rows, res.Quorum...)
	if res.Fill.Phase != "" {
		rows = append(rows, res.Fill)
	}
	rows = append(rows, res.Loads...)
	rows = append(rows, res.Acks...)
	rows = append(rows, res.Cycles...)
	for _, c := range res.Consumers {
		rows = append(rows, c.Create, c.Acks)
	}
	for _, r := range rows {
		if r.Phase == "" {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%s\n", r.Phase, r.Msgs, r.Commits,
			r.msgRate(), r.commitRate(), us(r.P50), us(r.P99), r.Note)
	}
	tw.Flush()
	if len(res.Consumers) > 0 {
		reportConsumers(w, cfg, res)
	}
	if len(res.Checks) > 0 {
		fmt.Fprintln(w, "\nbatch checks:")
		for _, c := range res.Checks {
			fmt.Fprintln(w, "  "+c)
		}
	}
}

func reportConsumers(w io.Writer, cfg config, res *results) {
	fmt.Fprintf(w, "\nprocess without consumers (after layout A): RSS %d MiB, idle CPU %.1f%% of a core over %v\n",
		res.Baseline.RSSAfter>>20, 100*res.Baseline.IdleCPU, cfg.idle)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "consumers\tcreated\tcreate s\tRSS before MiB\tRSS after MiB\tKiB per consumer\tidle CPU %\tacks/s\tdelete stream s")
	for _, c := range res.Consumers {
		per := 0.0
		if c.Created > 0 {
			per = float64(c.RSSAfter-c.RSSBefore) / 1024 / float64(c.Created)
		}
		fmt.Fprintf(tw, "R%d\t%d\t%.1f\t%d\t%d\t%.1f\t%.1f\t%.0f\t%.1f\n", c.Replicas, c.Created, c.Create.Elapsed.Seconds(),
			c.RSSBefore>>20, c.RSSAfter>>20, per, 100*c.IdleCPU, c.Acks.msgRate(), c.DeleteTime.Seconds())
	}
	tw.Flush()
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
