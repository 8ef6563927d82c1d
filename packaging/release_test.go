package packaging

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The release TestMain makes: a version with a pre-release and commits
// after the tag exercises hack/release's Debian version.
const (
	version    = "v1.2.3-rc.1-4-g0123abc"
	debVersion = "1.2.3~rc.1+4.g0123abc"
)

// dist is the directory hack/release wrote, commit the commit it stamped.
var dist, commit string

func TestMain(m *testing.M) {
	os.Exit(releaseAndRun(m))
}

// releaseAndRun runs hack/release once into a temporary directory, runs
// the tests and removes the directory (TestMain has no t.TempDir).
func releaseAndRun(m *testing.M) int {
	var err error
	dist, err = os.MkdirTemp("", "mqttd-release-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dist)
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "git rev-parse HEAD:", err)
		return 1
	}
	commit = strings.TrimSpace(string(out))
	release := exec.Command("../hack/release")
	release.Env = append(os.Environ(), "DIST="+dist, "VERSION="+version, "MAINTAINER=mqttd tests <tests@localhost>")
	if out, err := release.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "hack/release: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// debFor is the .deb hack/release made for a Debian architecture.
func debFor(arch string) string {
	return filepath.Join(dist, fmt.Sprintf("mqttd_%s_%s.deb", debVersion, arch))
}

// unpack extracts the .deb's files (dpkg-deb -x) and its control files
// (dpkg-deb -e) into temporary directories.
func unpack(t *testing.T, arch string) (root, control string) {
	t.Helper()
	dpkgDeb := need(t, "dpkg-deb", "dpkg")
	root, control = t.TempDir(), filepath.Join(t.TempDir(), "DEBIAN")
	for _, args := range [][]string{{"-x", debFor(arch), root}, {"-e", debFor(arch), control}} {
		if out, err := exec.Command(dpkgDeb, args...).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return root, control
}

// The files every .deb holds, with their modes.
var debFiles = map[string]fs.FileMode{
	"usr/bin/mqttd":                    0o755,
	"lib/systemd/system/mqttd.service": 0o644,
	"etc/mqttd/mqttd.yaml":             0o644,
	"usr/share/doc/mqttd/copyright":    0o644,
}

func TestDebs(t *testing.T) {
	for _, tc := range []struct {
		arch, goarch, goarm string
		machine             elf.Machine
	}{
		{"amd64", "amd64", "", elf.EM_X86_64},
		{"arm64", "arm64", "", elf.EM_AARCH64},
		// Raspberry Pi OS's armhf runs on ARMv6 (Pi Zero and 1).
		{"armhf", "arm", "6", elf.EM_ARM},
	} {
		t.Run(tc.arch, func(t *testing.T) {
			fields, err := exec.Command(need(t, "dpkg-deb", "dpkg"), "-f", debFor(tc.arch), "Package", "Version", "Architecture", "Depends").Output()
			if err != nil {
				t.Fatalf("dpkg-deb -f: %v", err)
			}
			if want := fmt.Sprintf("Package: mqttd\nVersion: %s\nArchitecture: %s\nDepends: passwd\n", debVersion, tc.arch); string(fields) != want {
				t.Errorf("control fields:\n%s\nwant\n%s", fields, want)
			}
			root, control := unpack(t, tc.arch)
			checkFiles(t, root)
			checkControl(t, control)
			checkBinary(t, filepath.Join(root, "usr/bin/mqttd"), tc.goarch, tc.goarm, tc.machine)
			if tc.arch == "amd64" {
				out, err := exec.Command(filepath.Join(root, "usr/bin/mqttd"), "version").Output()
				if want := fmt.Sprintf("mqttd %s (commit %s, ", version, commit[:12]); err != nil || !strings.HasPrefix(string(out), want) {
					t.Errorf("mqttd version: %q (%v), want it to start with %q", out, err, want)
				}
			}

			cfg, err := os.ReadFile(filepath.Join(root, "etc/mqttd/mqttd.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(`(?m)^data_dir: /var/lib/mqttd\s`).Match(cfg) {
				t.Errorf("the packaged config does not keep its state in /var/lib/mqttd")
			}
			copyright, err := os.ReadFile(filepath.Join(root, "usr/share/doc/mqttd/copyright"))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range []string{"Apache License", "Version 2.0", "==== go.etcd.io/bbolt", "==== github.com/gorilla/websocket"} {
				if !bytes.Contains(copyright, []byte(w)) {
					t.Errorf("copyright does not mention %q", w)
				}
			}
		})
	}
}

// checkFiles checks that root holds exactly debFiles, with their modes.
func checkFiles(t *testing.T, root string) {
	t.Helper()
	var got []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		got = append(got, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if want, ok := debFiles[rel]; ok && info.Mode() != want {
			t.Errorf("%s: mode %v, want %v", rel, info.Mode(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]string, 0, len(debFiles))
	for f := range debFiles {
		want = append(want, f)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("files:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// checkControl checks the control files: the config is a conffile (an
// upgrade keeps the admin's edits) and the maintainer scripts are
// executable shell that parses.
func checkControl(t *testing.T, control string) {
	t.Helper()
	conffiles, err := os.ReadFile(filepath.Join(control, "conffiles"))
	if err != nil || string(conffiles) != "/etc/mqttd/mqttd.yaml\n" {
		t.Errorf("conffiles: %q (%v), want /etc/mqttd/mqttd.yaml", conffiles, err)
	}
	for _, script := range []string{"postinst", "prerm", "postrm"} {
		path := filepath.Join(control, script)
		st, err := os.Stat(path)
		if err != nil {
			t.Error(err)
			continue
		}
		if st.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s is not executable: %v", script, st.Mode())
		}
		if out, err := exec.Command("sh", "-n", path).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v\n%s", script, err, out)
		}
	}
}

// checkBinary checks that bin is a static Linux binary for goarch (and
// goarm) built as hack/release builds releases, with the version stamped.
func checkBinary(t *testing.T, bin, goarch, goarm string, machine elf.Machine) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != machine {
		t.Errorf("ELF machine %v, want %v", f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("dynamically linked (has an interpreter); want a static binary")
		}
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	want := map[string]string{"GOOS": "linux", "GOARCH": goarch, "CGO_ENABLED": "0", "-trimpath": "true", "-tags": "nethttpomithttp2"}
	if goarm != "" {
		want["GOARM"] = goarm
	}
	for k, v := range want {
		if settings[k] != v {
			t.Errorf("build setting %s=%q, want %q", k, settings[k], v)
		}
	}
	// The build info leaves -ldflags out of a -trimpath build: look for
	// the stamps themselves.
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, stamp := range []string{version, commit} {
		if !bytes.Contains(data, []byte(stamp)) {
			t.Errorf("the binary does not hold the stamp %s", stamp)
		}
	}
}

// TestUnit checks the systemd unit's settings and has systemd-analyze
// verify it (and a broken copy, so that the check is seen to bite).
func TestUnit(t *testing.T) {
	root, _ := unpack(t, "amd64")
	unit, err := os.ReadFile(filepath.Join(root, "lib/systemd/system/mqttd.service"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(unit), "\n")
	for _, want := range []string{
		"User=mqttd", "StateDirectory=mqttd", "ExecStart=/usr/bin/mqttd --config /etc/mqttd/mqttd.yaml",
		"ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure", "CapabilityBoundingSet=",
		"NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "PrivateDevices=yes",
		"ProtectKernelTunables=yes", "ProtectKernelModules=yes", "ProtectControlGroups=yes",
		"RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX", "RestrictNamespaces=yes", "LockPersonality=yes",
		"MemoryDenyWriteExecute=yes", "SystemCallArchitectures=native", "WantedBy=multi-user.target",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("the unit has no line %q", want)
		}
	}

	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed (it comes with systemd)")
	}
	// verify checks that ExecStart's binary exists: point it at the
	// unpacked one.
	bin := filepath.Join(root, "usr/bin/mqttd")
	good := strings.Replace(string(unit), "ExecStart=/usr/bin/mqttd ", "ExecStart="+bin+" ", 1)
	if out := analyze(t, good); out != "" {
		t.Errorf("systemd-analyze verify:\n%s", out)
	}
	// A misspelt key is only a warning to systemd, and the setting is
	// lost: any output counts as a failure.
	broken := strings.Replace(good, "ProtectSystem=strict", "ProtectSytem=strict", 1)
	if out := analyze(t, broken); !strings.Contains(out, "ProtectSytem") {
		t.Errorf("systemd-analyze verify did not object to a misspelt key: %q", out)
	}
}

// analyze runs systemd-analyze verify on unit, saved as mqttd.service,
// and returns what it printed, with its exit status when it failed.
func analyze(t *testing.T, unit string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mqttd.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", path).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s(%v)", out, err)
	}
	return string(out)
}

// overlayRoot runs its first argument, a script, in a chroot into a
// throw-away overlay of / (writes go to a tmpfs in $2, gone with the mount
// namespace unshare made) with the .deb, its second argument, at /tmp. It
// exits 77 when the overlay cannot be set up.
const overlayRoot = `
setup() { "$@" || { echo "cannot set up the overlay: $*"; exit 77; }; }
setup mount -t tmpfs tmpfs "$3"
setup mkdir "$3/upper" "$3/work" "$3/root"
setup mount -t overlay overlay -o "lowerdir=/,upperdir=$3/upper,workdir=$3/work" "$3/root"
setup mount --rbind /proc "$3/root/proc"
setup mount --rbind /dev "$3/root/dev"
setup cp "$1" "$2" "$3/root/tmp/"
exec chroot "$3/root" sh "/tmp/${1##*/}" "/tmp/${2##*/}"
`

// TestInstallLifecycle installs, upgrades, removes, reinstalls and purges
// the amd64 .deb with dpkg (testdata/lifecycle.sh), running the maintainer
// scripts for real in a copy of this machine that only the test sees.
func TestInstallLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to install with dpkg into a throw-away overlay of /")
	}
	if out, err := exec.Command("unshare", "--mount", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot make a mount namespace: %v %s", err, out)
	}
	script, err := filepath.Abs("testdata/lifecycle.sh")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private",
		"sh", "-c", overlayRoot, "sh", script, debFor("amd64"), t.TempDir())
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == 77 {
		t.Skipf("no overlay of / here:\n%s", out)
	}
	if err != nil || !bytes.HasSuffix(out, []byte("lifecycle ok\n")) {
		t.Fatalf("testdata/lifecycle.sh: %v\n%s", err, out)
	}
}
