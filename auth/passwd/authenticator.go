package passwd

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"mqttd/auth"
)

// ErrAnonymous is returned for a client without a user name. The password
// file cannot say whether anonymous clients are welcome; the caller
// decides (allow_anonymous), and passing the error on refuses the client.
var ErrAnonymous = fmt.Errorf("passwd: no user name: %w", auth.ErrNotAuthorized)

// ErrBusy is returned when more clients wait for a hash check than
// Options.MaxQueue: they are refused at once rather than queued without
// bound.
var ErrBusy = fmt.Errorf("passwd: too many logins waiting: %w", auth.ErrNotAuthorized)

// Options tune an Authenticator; zero values mean the defaults.
type Options struct {
	// Workers is how many hash checks run at once (default GOMAXPROCS).
	Workers int
	// MaxQueue is how many checks may wait for a worker before more are
	// refused with ErrBusy (default 64 × Workers).
	MaxQueue int
	// FailureDelay is the wait before checking a client whose address
	// failed to log in once; it doubles with each further failure up to
	// MaxFailureDelay (defaults 100ms and 5s). A success takes back one
	// failure.
	FailureDelay, MaxFailureDelay time.Duration
	// MaxAddresses bounds how many addresses' failures are remembered
	// (default 10,000); failures older than ForgetAfter (default 10m)
	// are forgotten first.
	MaxAddresses int
	ForgetAfter  time.Duration
	// OnFailure, if set, is told of each refused login (never the
	// password), to log it.
	OnFailure func(c auth.ClientInfo, err error)
}

func (o Options) withDefaults() Options {
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.MaxQueue <= 0 {
		o.MaxQueue = 64 * o.Workers
	}
	if o.FailureDelay <= 0 {
		o.FailureDelay = 100 * time.Millisecond
	}
	if o.MaxFailureDelay <= 0 {
		o.MaxFailureDelay = 5 * time.Second
	}
	if o.MaxAddresses <= 0 {
		o.MaxAddresses = 10000
	}
	if o.ForgetAfter <= 0 {
		o.ForgetAfter = 10 * time.Minute
	}
	return o
}

// Stats counts an Authenticator's answers.
type Stats struct {
	// Accepted and Failed count checked logins; Failed includes
	// UnknownUser.
	Accepted, Failed, UnknownUser uint64
	// Anonymous counts clients without a user name (not checked).
	Anonymous uint64
	// Busy counts clients refused because the queue was full.
	Busy uint64
	// Delayed counts logins slowed down after earlier failures.
	Delayed uint64
}

// Authenticator checks CONNECT credentials against a password file. It is
// safe for concurrent use.
type Authenticator struct {
	path  string
	opts  Options
	table atomic.Pointer[table]

	workers chan struct{}
	waiting atomic.Int64

	accepted, failed, unknown, anonymous, busy, delayed atomic.Uint64

	failMu   sync.Mutex
	failures map[string]failure
}

// table is one loaded file, swapped whole on Reload.
type table struct {
	users Users
	// dummy is checked for unknown users, so they cost what a wrong
	// password costs.
	dummy Hash
}

type failure struct {
	count int
	last  time.Time
}

// New loads the password file at path.
func New(path string, opts Options) (*Authenticator, error) {
	a := &Authenticator{path: path, opts: opts.withDefaults(), failures: map[string]failure{}}
	a.workers = make(chan struct{}, a.opts.Workers)
	if err := a.Reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// Reload reads the file again and swaps it in whole. On an error the
// users loaded before stay in force.
func (a *Authenticator) Reload() error {
	users, err := Load(a.path)
	if err != nil {
		return err
	}
	dummy, err := dummyFor(users)
	if err != nil {
		return err
	}
	a.table.Store(&table{users: users, dummy: dummy})
	return nil
}

// dummyFor makes the hash unknown users are checked against: one like
// the dearest entry of users (its kind, iterations and salt length, so
// the same work), with a random salt and a sum no password gives, so
// that an unknown user costs what the slowest known one does and no
// name can be told from an unknown one by being slower. Entries cheaper
// than it ($6$ ones) still answer faster: Legacy lists them.
func dummyFor(users Users) (Hash, error) {
	dearest := Hash{pbkdf2: true, iterations: DefaultIterations, salt: make([]byte, saltLen)}
	if len(users) > 0 {
		dearest = Hash{}
		for _, h := range users {
			if h.dearerThan(dearest) {
				dearest = h
			}
		}
	}
	d := Hash{pbkdf2: dearest.pbkdf2, iterations: dearest.iterations, salt: make([]byte, len(dearest.salt)),
		sum: make([]byte, sumLen)}
	if _, err := rand.Read(d.salt); err != nil {
		return Hash{}, err
	}
	if _, err := rand.Read(d.sum); err != nil {
		return Hash{}, err
	}
	return d, nil
}

// dearerThan reports whether checking h costs more than checking o:
// PBKDF2 over one SHA-512, then more iterations, then a longer salt.
func (h Hash) dearerThan(o Hash) bool {
	if h.pbkdf2 != o.pbkdf2 {
		return h.pbkdf2
	}
	if h.iterations != o.iterations {
		return h.iterations > o.iterations
	}
	return len(h.salt) > len(o.salt)
}

// Legacy returns, sorted, the users whose entries are $6$ (one salted
// SHA-512, as Mosquitto before 2.0 wrote them): cheaper to guess
// offline, and, in a file that also has $7$ entries, quicker to check
// than an unknown user, so that their names can be told apart by timing.
// Setting their passwords again (mqttd passwd) makes them $7$.
func (a *Authenticator) Legacy() []string { return a.table.Load().users.Legacy() }

// Authenticate checks the client's user name and password. A client
// without a user name gets ErrAnonymous; a wrong password or unknown user
// auth.ErrBadCredentials; a full queue ErrBusy. A client whose address
// failed recently first waits (Options.FailureDelay), on its own
// goroutine, not on a worker.
func (a *Authenticator) Authenticate(c auth.ClientInfo, password []byte) error {
	_, err := a.AuthenticateEntry(c, password)
	return err
}

// AuthenticateEntry is Authenticate that also returns, on success, the
// stamp of the entry the password matched (as Entry reports it), so a
// reload that changes or deletes it can be told from one that does not.
func (a *Authenticator) AuthenticateEntry(c auth.ClientInfo, password []byte) (stamp uint32, err error) {
	if c.Username == "" {
		a.anonymous.Add(1)
		return 0, ErrAnonymous
	}
	addr := host(c.Remote)
	// Clients without an address (in-process ones) are not slowed: under
	// one shared key, one of them failing would slow them all.
	if d := a.delay(addr); addr != "" && d > 0 {
		a.delayed.Add(1)
		t := time.NewTimer(d)
		<-t.C
	}
	h, ok, known, err := a.check(c.Username, password)
	switch {
	case err != nil:
		a.busy.Add(1)
	case ok:
		a.accepted.Add(1)
		a.forget(addr)
		return h.stamp(), nil
	default:
		a.failed.Add(1)
		if !known {
			a.unknown.Add(1)
		}
		if addr != "" {
			a.remember(addr)
		}
		err = auth.ErrBadCredentials
	}
	if a.opts.OnFailure != nil {
		a.opts.OnFailure(c, err)
	}
	return 0, err
}

// check runs one hash check on a worker; h is the entry checked.
func (a *Authenticator) check(user string, password []byte) (h Hash, ok, known bool, err error) {
	if a.waiting.Add(1) > int64(a.opts.MaxQueue+a.opts.Workers) {
		a.waiting.Add(-1)
		return Hash{}, false, false, ErrBusy
	}
	a.workers <- struct{}{}
	defer func() {
		<-a.workers
		a.waiting.Add(-1)
	}()
	h, known = a.table.Load().entry(user)
	// Verify runs for unknown users too; known gates the result after.
	ok = h.Verify(password)
	return h, ok && known, known, nil
}

// entry is the hash a login as user is checked against: the user's, or
// for an unknown user the dummy.
func (t *table) entry(user string) (Hash, bool) {
	if h, ok := t.users[user]; ok {
		return h, true
	}
	return t.dummy, false
}

// Entry reports whether the file, as last loaded, has an entry for user,
// and a stamp of it (never 0) that changes when the entry does: the
// broker asks after a reload whether a connected user is still there
// with the password it logged in with.
func (a *Authenticator) Entry(user string) (stamp uint32, ok bool) {
	h, ok := a.table.Load().users[user]
	return h.stamp(), ok
}

// stamp is a 32-bit digest of the entry's salted sum (random per entry),
// never 0.
func (h Hash) stamp() uint32 {
	if len(h.sum) < 4 {
		return 1
	}
	return max(binary.BigEndian.Uint32(h.sum), 1)
}

// Stats returns the counters.
func (a *Authenticator) Stats() Stats {
	return Stats{
		Accepted:    a.accepted.Load(),
		Failed:      a.failed.Load(),
		UnknownUser: a.unknown.Load(),
		Anonymous:   a.anonymous.Load(),
		Busy:        a.busy.Load(),
		Delayed:     a.delayed.Load(),
	}
}

// host is the address failures are counted against: the IP without the
// port, since an attacker picks a new port for each connection.
func host(a net.Addr) string {
	if a == nil {
		return ""
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}

// delay is how long to wait before checking a client from addr.
func (a *Authenticator) delay(addr string) time.Duration {
	a.failMu.Lock()
	f, ok := a.failures[addr]
	a.failMu.Unlock()
	if !ok || time.Since(f.last) > a.opts.ForgetAfter {
		return 0
	}
	d := a.opts.FailureDelay
	for i := 1; i < f.count && d < a.opts.MaxFailureDelay; i++ {
		d *= 2
	}
	return min(d, a.opts.MaxFailureDelay)
}

func (a *Authenticator) remember(addr string) {
	now := time.Now()
	a.failMu.Lock()
	defer a.failMu.Unlock()
	f, ok := a.failures[addr]
	if !ok && len(a.failures) >= a.opts.MaxAddresses {
		a.sweepLocked(now)
	}
	a.failures[addr] = failure{count: f.count + 1, last: now}
}

// sweepLocked makes room in a full failures map: forgotten addresses go
// first, then, if none were old enough, an arbitrary tenth, so many
// addresses cannot grow the map without bound.
func (a *Authenticator) sweepLocked(now time.Time) {
	for k, f := range a.failures {
		if now.Sub(f.last) > a.opts.ForgetAfter {
			delete(a.failures, k)
		}
	}
	for k := range a.failures {
		if len(a.failures) < a.opts.MaxAddresses-a.opts.MaxAddresses/10 {
			break
		}
		delete(a.failures, k)
	}
}

// forget takes one failure of addr back after a success: only one, so
// that a client with an account of its own cannot clear its address's
// delay by logging in between guesses.
func (a *Authenticator) forget(addr string) {
	a.failMu.Lock()
	defer a.failMu.Unlock()
	f, ok := a.failures[addr]
	switch {
	case !ok:
	case f.count <= 1:
		delete(a.failures, addr)
	default:
		f.count--
		a.failures[addr] = f
	}
}
