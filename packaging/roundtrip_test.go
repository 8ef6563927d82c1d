package packaging

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

// startTimeout bounds a broker's start, slow under emulation;
// clientTimeout bounds each Mosquitto client.
const (
	startTimeout  = 30 * time.Second
	clientTimeout = 30 * time.Second
)

// TestQoS2RoundTrip runs each release binary with the packaged config (its
// listeners replaced by a free loopback port, its data_dir by a temporary
// one) and passes a QoS 2 message through it with mosquitto_pub and
// mosquitto_sub: the ARM binaries under qemu-user, the ARMv6 one on the
// Pi Zero's CPU (an ARM1176).
func TestQoS2RoundTrip(t *testing.T) {
	root, _ := unpack(t, "amd64")
	config := filepath.Join(root, "etc/mqttd/mqttd.yaml")
	armhf, _ := unpack(t, "armhf")
	binary := func(name string) string { return filepath.Join(dist, "mqttd_"+version+"_linux_"+name) }
	for _, tc := range []struct {
		name string
		qemu []string // the emulator and its flags; none runs natively
		bin  string
	}{
		{"amd64 from the deb", nil, filepath.Join(root, "usr/bin/mqttd")},
		{"arm64", []string{"qemu-aarch64"}, binary("arm64")},
		{"armv7", []string{"qemu-arm"}, binary("armv7")},
		{"armv6 from the armhf deb on an ARM1176", []string{"qemu-arm", "-cpu", "arm1176"}, filepath.Join(armhf, "usr/bin/mqttd")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub, pub := need(t, "mosquitto_sub", "mosquitto-clients"), need(t, "mosquitto_pub", "mosquitto-clients")
			cmd := []string{tc.bin}
			if tc.qemu != nil {
				cmd = append([]string{need(t, tc.qemu[0], "qemu-user")}, append(tc.qemu[1:], tc.bin)...)
			}
			broker := start(t, cmd[0], append(cmd[1:], "--config", config,
				"--listen", "127.0.0.1:0", "--metrics", "off", "--data-dir", filepath.Join(t.TempDir(), "data"), "--log-level", "warn")...)
			addr := broker.waitFor(t, regexp.MustCompile(`MQTT listening on 127\.0\.0\.1:(\d+)`), startTimeout)
			port := addr[1]

			// mosquitto_sub's output is a pipe here: line buffering lets the
			// test see SUBACK as it comes.
			s := start(t, "stdbuf", "-oL", sub, "-h", "127.0.0.1", "-p", port, "-i", "pkg-sub", "-q", "2", "-t", "pkg/qos2",
				"-C", "1", "-W", fmt.Sprint(clientTimeout/time.Second), "-d")
			s.waitFor(t, regexp.MustCompile(`(?m)^Subscribed \(mid: \d+\): 2$`), clientTimeout)
			p := start(t, pub, "-h", "127.0.0.1", "-p", port, "-i", "pkg-pub", "-q", "2", "-t", "pkg/qos2",
				"-m", "over "+tc.name, "-d")
			p.wait(t, clientTimeout)
			s.wait(t, clientTimeout)
			for _, c := range []struct {
				p    *proc
				want []string
			}{
				{p, []string{"received PUBREC", "sending PUBREL", "received PUBCOMP (Mid: 1, RC:0)"}},
				{s, []string{"received PUBLISH (d0, q2", "sending PUBREC", "received PUBREL", "sending PUBCOMP", "\nover " + tc.name + "\n"}},
			} {
				for _, w := range c.want {
					if out := c.p.output(); !strings.Contains(out, w) {
						t.Errorf("%s did not say %q:\n%s", c.p.cmd.Args, w, out)
					}
				}
			}

			if err := broker.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			broker.wait(t, startTimeout)
		})
	}
}

// TestARMv6CheckBites runs the ARMv7 binary on the ARM1176 that the ARMv6
// round trip uses: it must fail, or that round trip proves nothing.
func TestARMv6CheckBites(t *testing.T) {
	qemu := need(t, "qemu-arm", "qemu-user")
	bin := filepath.Join(dist, "mqttd_"+version+"_linux_armv7")
	cmd := exec.Command(qemu, "-cpu", "arm1176", bin, "version")
	cmd.Dir = t.TempDir() // where qemu dumps core, if core dumps are on
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("the ARMv7 binary ran on an ARM1176: %s", out)
	}
}

// need returns the path of a command the test runs, skipping outside CI
// when it is missing; CI installs them (.ci/run), so there it must exist.
// pkg is the Debian package that has it.
func need(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s missing in CI: .ci/run must install it", name)
	}
	t.Skipf("%s not installed (apt-get install %s)", name, pkg)
	return ""
}

// proc is a child process whose output (stdout and stderr) is kept.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been waited for
	err    error         // its exit status, valid once exited is closed

	mu   sync.Mutex
	out  strings.Builder
	grew chan struct{} // a line arrived (capacity 1)
}

// start runs a command; the test's cleanup kills it if it still runs.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(name, args...), exited: make(chan struct{}), grew: make(chan struct{}, 1)}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.grew <- struct{}{}:
			default:
			}
		}
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitFor returns re's submatches in the output once it appears, failing
// if the process exits first or the timeout passes.
func (p *proc) waitFor(t *testing.T, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		if m := re.FindStringSubmatch(p.output()); m != nil {
			return m
		}
		select {
		case <-p.grew:
		case <-p.exited:
			if m := re.FindStringSubmatch(p.output()); m != nil {
				return m
			}
			t.Fatalf("%s exited (%v) before printing %q:\n%s", p.cmd.Path, p.err, re, p.output())
		case <-deadline.C:
			t.Fatalf("%s did not print %q within %s:\n%s", p.cmd.Path, re, timeout, p.output())
		}
	}
}

// wait waits for the process to exit and fails unless it exited 0.
func (p *proc) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.exited:
		if p.err != nil {
			t.Fatalf("%s: %v:\n%s", p.cmd.Path, p.err, p.output())
		}
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s:\n%s", p.cmd.Path, timeout, p.output())
	}
}
