package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// latencies collects the durations of one phase's commits.
type latencies []time.Duration

func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// row is one line of the printed table.
type row struct {
	Phase   string
	Msgs    int // messages written, deleted, loaded or acknowledged
	Commits int // round trips that confirmed them
	Elapsed time.Duration
	P50     time.Duration
	P99     time.Duration
	Note    string
}

func (r row) msgRate() float64    { return rate(r.Msgs, r.Elapsed) }
func (r row) commitRate() float64 { return rate(r.Commits, r.Elapsed) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// pubAck is the answer of the stream's leader to a publish or to an
// atomic batch's commit.
type pubAck struct {
	Stream string `json:"stream"`
	Seq    uint64 `json:"seq"`
	Batch  string `json:"batch"`
	Count  int    `json:"count"`
	Error  *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// entry is one message of a batch: subject, payload and headers of its
// own (a tombstone's Nats-TTL).
type entry struct {
	subject string
	data    []byte
	ttl     string
}

// batchN numbers this process's batches: a batch id must be unique
// among the stream's open batches.
var batchN atomic.Int64

// publishBatch writes msgs as one atomic batch (AllowAtomicPublish): every
// message but the last is published without a reply subject (the leader
// stages it and answers nothing), the last carries Nats-Batch-Commit and
// is a request whose answer confirms the whole batch once a quorum
// holds it. nats.go v1.56 has no helper for it; the headers are the
// server's (stream.go, JSBatchId, JSBatchSeq, JSBatchCommit). A commit
// nobody answered (a stream just made, whose interest has not yet
// reached this server) is sent again whole, under a new id, until
// timeout: the messages before it went nowhere.
func publishBatch(nc *nats.Conn, msgs []entry, timeout time.Duration) (pubAck, error) {
	if len(msgs) == 0 {
		return pubAck{}, errors.New("empty batch")
	}
	deadline := time.Now().Add(timeout)
	for {
		reply, err := sendBatch(nc, msgs, timeout)
		if errors.Is(err, nats.ErrNoResponders) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if err != nil {
			return pubAck{}, fmt.Errorf("batch commit: %w", err)
		}
		return decodeAck(reply.Data)
	}
}

func sendBatch(nc *nats.Conn, msgs []entry, timeout time.Duration) (*nats.Msg, error) {
	id := "b" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(batchN.Add(1), 10)
	for i, e := range msgs {
		m := nats.NewMsg(e.subject)
		m.Data = e.data
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if e.ttl != "" {
			m.Header.Set("Nats-TTL", e.ttl)
		}
		if i == len(msgs)-1 {
			m.Header.Set("Nats-Batch-Commit", "1")
			return nc.RequestMsg(m, timeout)
		}
		if err := nc.PublishMsg(m); err != nil {
			return nil, err
		}
	}
	panic("unreachable")
}

func decodeAck(data []byte) (pubAck, error) {
	var a pubAck
	if err := json.Unmarshal(data, &a); err != nil {
		return a, fmt.Errorf("ack %q: %w", data, err)
	}
	if a.Error != nil {
		return a, fmt.Errorf("stream: %s (%d)", a.Error.Description, a.Error.ErrCode)
	}
	return a, nil
}

// directBatch asks a stream's direct get API (AllowDirect: any replica
// answers) for the messages req selects, one reply each, ending with a
// status 204 (EOB) message, and returns them; 404 is no message.
func directBatch(nc *nats.Conn, stream string, req any, timeout time.Duration) ([]*nats.Msg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, body); err != nil {
		return nil, err
	}
	var got []*nats.Msg
	deadline := time.Now().Add(timeout)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return got, fmt.Errorf("direct get after %d messages: %w", len(got), err)
		}
		switch m.Header.Get("Status") {
		case "":
			got = append(got, m)
		case "204":
			return got, nil
		case "404":
			return got, nil
		default:
			return got, fmt.Errorf("direct get: status %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
		}
	}
}

// procStat reads this process's resident memory (VmRSS, bytes) and CPU
// time (utime+stime, in clock ticks of 1/100 s, Linux's USER_HZ).
func procStat() (rss int64, ticks int64, err error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			rss = kb << 10
		}
	}
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 13 {
		return 0, 0, errors.New("/proc/self/stat: too few fields")
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return rss, utime + stime, nil
}

// idleCPU is the share of one core the process used over d, doing
// nothing of its own.
func idleCPU(d time.Duration) (float64, error) {
	_, t0, err := procStat()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(d)
	_, t1, err := procStat()
	if err != nil {
		return 0, err
	}
	return float64(t1-t0) / 100 / time.Since(start).Seconds(), nil
}

// diskBytes sums the sizes of the files under the directories named
// stream inside root (the stream's store on each server).
func diskBytes(root, stream string) int64 {
	var n int64
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if strings.Contains(path, string(filepath.Separator)+"streams"+string(filepath.Separator)+stream+string(filepath.Separator)) {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func payload(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}
