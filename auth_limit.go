package mqttd

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"mqttd/auth"
)

// Login attempts are limited per source, a token bucket each: an IPv4
// address, or an IPv6 /64 (one host usually holds a whole /64, and each
// of its addresses counting apart would multiply its guesses). A login
// takes a token before anything is checked and gives it back when it
// succeeds, so only refused logins spend the bucket, and a success can
// neither refill it for others nor run ahead of it: at most burst
// checks from one source are under way at once, whatever the number of
// its connections. A login that finds the bucket empty waits, then is
// refused without a hash check (5.0 CONNACK 0x9F, 3.1.1 3). Loopback
// and non-IP sources are not limited, as with max_connections_per_address.

// Defaults of the login limits (Auth).
const (
	DefaultLoginBurst     = 10
	DefaultLoginInterval  = 10 * time.Second
	DefaultLoginAddresses = 10000
	// loginRefusalWait is the most a login refused by its bucket waits:
	// a source that tries faster than the bucket refills then holds
	// each connection a while (bounded by max_connections_per_address)
	// rather than turning them over as fast as it can.
	loginRefusalWait = 2 * time.Second
	// loginRetry is how often a login finding its bucket empty looks
	// again while it waits: logins under way hold tokens until they
	// succeed, and a burst of good ones (a NAT's devices reconnecting at
	// once) gets them back as those do.
	loginRetry = 50 * time.Millisecond
)

// errLoginRateLimited refuses a login whose source's bucket is empty.
var errLoginRateLimited = fmt.Errorf("too many refused logins from this address (auth.login_burst, auth.login_interval): %w",
	auth.ErrNotAuthorized)

// loginLimiter holds the buckets, at most max of them.
type loginLimiter struct {
	burst    float64
	interval time.Duration
	max      int

	mu      sync.Mutex
	buckets map[netip.Prefix]*loginBucket
	st      *stats // loginsLimited, loginSources, loginEvicted
}

type loginBucket struct {
	tokens float64
	at     int64 // unix nanos tokens was computed at
}

func newLoginLimiter(a Auth, st *stats) *loginLimiter {
	l := &loginLimiter{burst: DefaultLoginBurst, interval: DefaultLoginInterval, max: DefaultLoginAddresses,
		buckets: map[netip.Prefix]*loginBucket{}, st: st}
	if a.LoginBurst > 0 {
		l.burst = float64(a.LoginBurst)
	}
	if a.LoginInterval > 0 {
		l.interval = a.LoginInterval
	}
	if a.LoginAddresses > 0 {
		l.max = a.LoginAddresses
	}
	return l
}

// loginSource is the key src's attempts count under; false for a source
// that is not limited.
func loginSource(src netip.Addr) (netip.Prefix, bool) {
	if !src.IsValid() {
		return netip.Prefix{}, false
	}
	bits := 32
	if src.Is6() {
		bits = 64
	}
	p, err := src.Prefix(bits)
	return p, err == nil
}

// refill brings b's tokens up to now.
func (l *loginLimiter) refill(b *loginBucket, now int64) {
	b.tokens = min(l.burst, b.tokens+float64(now-b.at)/float64(l.interval))
	b.at = now
}

// take reserves a token for a login from src, or says how long to wait
// before refusing it when there is none.
func (l *loginLimiter) take(src netip.Addr) (wait time.Duration, ok bool) {
	key, limited := loginSource(src)
	if !limited {
		return 0, true
	}
	now := time.Now().UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= l.max {
			l.sweepLocked(now)
		}
		b = &loginBucket{tokens: l.burst, at: now}
		l.buckets[key] = b
		l.st.loginSources.Store(int64(len(l.buckets)))
	}
	l.refill(b, now)
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) * float64(l.interval)), false
	}
	b.tokens--
	return 0, true
}

// refund gives back the token of a login from src that succeeded.
func (l *loginLimiter) refund(src netip.Addr) {
	key, limited := loginSource(src)
	if !limited {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.buckets[key]; b != nil {
		l.refill(b, time.Now().UnixNano())
		b.tokens = min(l.burst, b.tokens+1)
	}
}

// sweepLocked makes room for a bucket: full ones go first (a full bucket
// is what a new source gets anyway), then, if none were, an arbitrary
// tenth, so that many sources cannot grow the map without bound. Those
// are counted: a source evicted before its bucket refilled starts afresh.
func (l *loginLimiter) sweepLocked(now int64) {
	for k, b := range l.buckets {
		if l.refill(b, now); b.tokens >= l.burst {
			delete(l.buckets, k)
		}
	}
	for k := range l.buckets {
		if len(l.buckets) < l.max-l.max/10 {
			break
		}
		delete(l.buckets, k)
		l.st.loginEvicted.Add(1)
	}
}

// admitLogin takes a token for a login by c, or waits and reports it
// refused, counted and logged like any refused login. While it waits it
// looks again every loginRetry, since the tokens may be held by logins
// under way that will succeed and give them back: only a bucket spent by
// refused logins refuses one. It may block: the caller runs it under
// mayBlock. A login admitted gives its token back with loginSucceeded.
func (s *Server) admitLogin(c *conn) bool {
	src := sourceAddr(c.info.Remote)
	deadline := time.Now().Add(loginRefusalWait)
	for {
		wait, ok := s.logins.take(src)
		if ok {
			return true
		}
		left := time.Until(deadline)
		if left > 0 {
			t := time.NewTimer(min(wait, left, loginRetry))
			select {
			case <-t.C:
				continue
			case <-s.done: // Shutdown need not wait for the refusal
				t.Stop()
			}
		}
		s.stats.loginsLimited.Add(1)
		s.loginFailed(*c.info, errLoginRateLimited)
		return false
	}
}

// loginSucceeded gives back the token of c's login.
func (s *Server) loginSucceeded(c *conn) { s.logins.refund(sourceAddr(c.info.Remote)) }
