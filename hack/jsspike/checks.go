package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// checkBatchLimits asks the servers what a committer would run into,
// on a layout A stream of its own, and says what they answered:
// a batch writing one subject twice (a session record changed twice in
// one commit window, under MaxMsgsPerSubject 1), a batch over the
// server's largest (1,000 messages by default), and a batch mixing a
// put and a tombstone of one entry.
func checkBatchLimits(ctx context.Context, cfg config, nc *nats.Conn, js jetstream.JetStream) ([]string, error) {
	const name = "K"
	stream, err := js.CreateStream(ctx, sessionStream(name, 0))
	if err != nil {
		return nil, err
	}
	defer js.DeleteStream(ctx, name)
	var out []string
	_, err = publishBatch(nc, []entry{
		{subject: name + ".c1.a.rec", data: []byte("v1")},
		{subject: name + ".c1.a.rec", data: []byte("v2")},
	}, cfg.timeout)
	got := "-"
	if m, gerr := stream.GetLastMsgForSubject(ctx, name+".c1.a.rec"); gerr == nil {
		got = string(m.Data)
	}
	out = append(out, fmt.Sprintf("one subject twice in a batch (MaxMsgsPerSubject 1): err=%v, last=%s, messages on it=%s",
		err, got, count(ctx, stream, name+".c1.a.rec")))

	big := make([]entry, 1001)
	for i := range big {
		big[i] = entry{subject: fmt.Sprintf("%s.c1.b.m.%d", name, i), data: []byte("x")}
	}
	_, err = publishBatch(nc, big, cfg.timeout)
	out = append(out, fmt.Sprintf("batch of 1001: err=%v", err))

	_, err = publishBatch(nc, []entry{
		{subject: name + ".c1.c.m.1", data: []byte("x")},
		{subject: name + ".c1.c.m.1", ttl: "1s"},
	}, cfg.timeout)
	out = append(out, fmt.Sprintf("put and tombstone of one entry in a batch: err=%v, messages on it=%s",
		err, count(ctx, stream, name+".c1.c.m.1")))
	if info, err := stream.Info(ctx); err == nil {
		out = append(out, fmt.Sprintf("stream after the three: %d messages on %d subjects (want 2 on 2: a record, a tombstone; the 1001 refused whole)",
			info.State.Msgs, info.State.NumSubjects))
	}
	for i := range out {
		out[i] = strings.ReplaceAll(out[i], "\n", " ")
	}
	return out, nil
}

// count is the number of messages the stream holds on subject, as its
// per-subject state tells.
func count(ctx context.Context, stream jetstream.Stream, subject string) string {
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return err.Error()
	}
	return fmt.Sprint(info.State.Subjects[subject])
}
