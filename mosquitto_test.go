package mqttd_test

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"mqttd"
)

func TestMosquittoClients(t *testing.T) {
	pubBin, subBin := needTool(t, "mosquitto_pub"), needTool(t, "mosquitto_sub")
	_, addr := startServer(t, mqttd.Options{})
	host, port, _ := strings.Cut(addr, ":")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, ver := range []string{"mqttv31", "mqttv311"} {
		t.Run(ver, func(t *testing.T) {
			// A retained message is set first, so the subscriber's first
			// message proves it is subscribed before the live ones are sent.
			run := func(bin string, args ...string) {
				t.Helper()
				out, err := exec.CommandContext(ctx, bin, append([]string{"-h", host, "-p", port, "-V", ver}, args...)...).CombinedOutput()
				if err != nil {
					t.Fatalf("%s %v: %v\n%s", bin, args, err, out)
				}
			}
			topic := "mosq/" + ver
			run(pubBin, "-t", topic+"/ready", "-m", "ready", "-r", "-q", "1")
			sub := exec.CommandContext(ctx, subBin, "-h", host, "-p", port, "-V", ver, "-t", topic+"/#", "-q", "2", "-v", "-C", "4")
			out, err := sub.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Start(); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewReader(out)
			if first, err := lines.ReadString('\n'); err != nil || first != topic+"/ready ready\n" {
				t.Fatalf("subscriber's first line %q (%v)", first, err)
			}
			for q := range 3 {
				run(pubBin, "-t", topic+"/q", "-m", "qos"+string(rune('0'+q)), "-q", string(rune('0'+q)))
			}
			rest, err := io.ReadAll(lines)
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Wait(); err != nil {
				t.Fatalf("mosquitto_sub: %v", err)
			}
			want := topic + "/q qos0\n" + topic + "/q qos1\n" + topic + "/q qos2\n"
			if got := string(rest); got != want {
				t.Errorf("mosquitto_sub printed %q, want %q", got, want)
			}
		})
	}
}
