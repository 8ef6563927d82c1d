package mqttd

import (
	"sync/atomic"
	"time"
)

// warnInterval is how often a repeated warning is logged at most.
const warnInterval = 10 * time.Second

// throttle is a warning logged at most every warnInterval: the time of
// the last one, in unix nanos. The zero value has logged none.
type throttle struct{ last atomic.Int64 }

// limited reports whether the warning was logged within warnInterval;
// when not, it records that the caller logs it now.
func (t *throttle) limited() bool {
	now := time.Now().UnixNano()
	prev := t.last.Load()
	return now-prev < int64(warnInterval) || !t.last.CompareAndSwap(prev, now)
}

// loginLogBurst is how many refused logins are logged each warnInterval.
const loginLogBurst = 20

// burstLimit lets loginLogBurst events through each warnInterval.
type burstLimit struct {
	window atomic.Int64 // unix nanos the current window started
	n      atomic.Int64 // events in it
}

func (b *burstLimit) allow() bool {
	now := time.Now().UnixNano()
	start := b.window.Load()
	if now-start >= int64(warnInterval) && b.window.CompareAndSwap(start, now) {
		b.n.Store(0)
	}
	return b.n.Add(1) <= loginLogBurst
}
