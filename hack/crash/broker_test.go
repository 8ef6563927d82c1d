package crash

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// mqttdBin is the mqttd binary TestMain builds once for every test.
var mqttdBin string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

// buildAndRun builds ./cmd/mqttd into a temporary directory, runs the
// tests and removes the directory (TestMain has no t.TempDir).
// CRASH_MQTTD_BIN names a binary to test instead, such as one built from
// another branch.
func buildAndRun(m *testing.M) int {
	if bin := os.Getenv("CRASH_MQTTD_BIN"); bin != "" {
		mqttdBin = bin
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "mqttd-crash-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	mqttdBin = filepath.Join(dir, "mqttd")
	if out, err := exec.Command("go", "build", "-o", mqttdBin, "mqttd/cmd/mqttd").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build mqttd/cmd/mqttd: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// brokerStartTimeout bounds how long a starting broker may take to say
// where it listens; opening a large database on a slow disk is included.
const brokerStartTimeout = 30 * time.Second

// broker is one run of the mqttd binary.
type broker struct {
	cmd    *exec.Cmd
	addr   string
	exited chan struct{} // closed once the process has been waited for
	err    error         // the exit status, valid once exited is closed

	mu  sync.Mutex
	log []string // the last lines the broker wrote, for failure messages
}

// listening is the banner line that names the MQTT address.
var listening = regexp.MustCompile(`MQTT listening on (127\.0\.0\.1:\d+)`)

// startBroker runs mqttd on dataDir, listening on a free loopback port
// for MQTT and another for its metrics (never the default's, which
// another broker may have), and returns once it has said where it listens.
func startBroker(t *testing.T, dataDir string, args ...string) *broker {
	t.Helper()
	args = append([]string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--data-dir", dataDir, "--log-level", "warn"}, args...)
	return runBroker(t, exec.Command(mqttdBin, args...))
}

// runBroker starts cmd, a run of mqttd, and returns once it has said
// where it listens; the process is killed at the test's cleanup.
func runBroker(t *testing.T, cmd *exec.Cmd) *broker {
	t.Helper()
	b := &broker{cmd: cmd, exited: make(chan struct{})}
	stderr, err := b.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	b.cmd.Stdout = b.cmd.Stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.cmd.Process.Kill()
		<-b.exited
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			b.keep(line)
			if m := listening.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		b.err = b.cmd.Wait()
		close(b.exited)
	}()
	timeout := time.NewTimer(brokerStartTimeout)
	defer timeout.Stop()
	select {
	case b.addr = <-addr:
		return b
	case <-b.exited:
		t.Fatalf("mqttd exited before listening (%v):\n%s", b.err, b.tail())
	case <-timeout.C:
		t.Fatalf("mqttd did not say where it listens within %s:\n%s", brokerStartTimeout, b.tail())
	}
	return nil
}

// keep remembers one line of the broker's output, the last 200 at most.
func (b *broker) keep(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.log) == 200 {
		b.log = b.log[1:]
	}
	b.log = append(b.log, line)
}

// tail is the broker's last output lines.
func (b *broker) tail() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.log, "\n")
}

// stop sends sig and waits for the process to end. After SIGKILL any exit
// status is fine; after SIGTERM the broker must exit 0 within its grace
// period (5 s) plus a margin.
func (b *broker) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := b.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
	timeout := time.NewTimer(15 * time.Second)
	defer timeout.Stop()
	select {
	case <-b.exited:
	case <-timeout.C:
		t.Fatalf("mqttd still running 15 s after %v:\n%s", sig, b.tail())
	}
	if sig == syscall.SIGTERM && b.err != nil {
		t.Errorf("mqttd exit after SIGTERM: %v\n%s", b.err, b.tail())
	}
}

// addrBook tells the clients where the broker listens now: every restart
// picks a new port. Clients wait on the channel get returns to learn of
// the next address.
type addrBook struct {
	mu      sync.Mutex
	addr    string
	changed chan struct{}
}

func newAddrBook(addr string) *addrBook {
	return &addrBook{addr: addr, changed: make(chan struct{})}
}

// get returns the current address and a channel closed when it changes.
func (a *addrBook) get() (string, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addr, a.changed
}

// set publishes a new address and wakes every client waiting for one.
func (a *addrBook) set(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.addr = addr
	close(a.changed)
	a.changed = make(chan struct{})
}
