package mqttd_test

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"mqttd"
	"mqttd/auth"
	"mqttd/auth/passwd"
	"mqttd/packets"
)

// writeFile writes content to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// writePasswords writes a password file in which each user's password
// is "pw-" and its name.
func writePasswords(t *testing.T, dir string, users ...string) string {
	t.Helper()
	p := filepath.Join(dir, "passwords")
	for i, u := range users {
		if err := passwd.Set(p, u, []byte("pw-"+u), i == 0); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// The ACL most tests here use: anonymous clients read public/; alice
// reads and writes sensors/ but not sensors/secret, and writes cmd/;
// writer writes everything; spy reads everything; every client reads and
// writes its own devices/<username>/ level.
const testACL = `# anonymous clients
topic read public/#

user alice
topic deny sensors/secret
topic readwrite sensors/#
topic write cmd/#

user writer
topic write #

user spy
topic read #

pattern readwrite devices/%u/#
`

// as is a CONNECT for client id with a username and password.
func as(id, user, password string) *packets.Connect {
	return &packets.Connect{ClientID: id, CleanStart: true, UsernameFlag: user != "", Username: user,
		PasswordFlag: password != "", Password: []byte(password)}
}

// refusedCode is the CONNACK code refusing a client: bad credentials
// (bad) or not authorized.
func refusedCode(v packets.Version, bad bool) packets.ReasonCode {
	switch {
	case v == packets.V5 && bad:
		return packets.BadUsernameOrPassword
	case v == packets.V5:
		return packets.NotAuthorized
	case bad:
		return packets.ConnRefusedBadCredentials
	}
	return packets.ConnRefusedNotAuthorized
}

// expectRefused connects with cp and checks the CONNACK refuses it with
// want, and the connection is then closed.
func expectRefused(t *testing.T, addr string, v packets.Version, cp *packets.Connect, want packets.ReasonCode) {
	t.Helper()
	rc, ack := connectReply(t, addr, v, cp)
	if ack.ReasonCode != want {
		t.Errorf("%s %q as %q: CONNACK %#x, want %#x", versionName(v), cp.ClientID, cp.Username, byte(ack.ReasonCode), byte(want))
	}
	rc.expectClosed()
}

// wideListener presents a loopback listener as one on every address
// (0.0.0.0), as a broker opened to the network is: tests listen on
// loopback only, and the broker decides from the address it is given.
type wideListener struct{ net.Listener }

func (l wideListener) Addr() net.Addr {
	a := *l.Listener.Addr().(*net.TCPAddr)
	a.IP = net.IPv4zero
	return &a
}

// startWide runs a broker whose only listener presents itself as
// 0.0.0.0, and returns the loopback address to dial.
func startWide(t *testing.T, opts mqttd.Options) (*mqttd.Server, string) {
	t.Helper()
	return startServer(t, opts, wrapListener(func(l net.Listener) net.Listener { return wideListener{l} }))
}

// scramClient is the client side of SCRAM-SHA-256 (RFC 5802), written
// from the RFC for the tests, apart from the broker's server side.
type scramClient struct {
	user, password, nonce string
	first, authMessage    string
	serverSignature       []byte
}

func (sc *scramClient) clientFirst() []byte {
	sc.first = "n=" + sc.user + ",r=" + sc.nonce
	return []byte("n,," + sc.first)
}

// clientFinal answers the server-first message.
func (sc *scramClient) clientFinal(t *testing.T, serverFirst []byte) []byte {
	t.Helper()
	out, err := sc.final(serverFirst)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// final is clientFinal for a goroutine that may not stop the test.
func (sc *scramClient) final(serverFirst []byte) ([]byte, error) {
	attrs := map[string]string{}
	for _, kv := range strings.Split(string(serverFirst), ",") {
		k, v, _ := strings.Cut(kv, "=")
		attrs[k] = v
	}
	salt, err := base64.StdEncoding.DecodeString(attrs["s"])
	iters, err2 := strconv.Atoi(attrs["i"])
	if err != nil || err2 != nil || !strings.HasPrefix(attrs["r"], sc.nonce) {
		return nil, fmt.Errorf("server-first %q", serverFirst)
	}
	salted, _ := pbkdf2.Key(sha256.New, sc.password, salt, iters, 32)
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	clientKey := mac(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	withoutProof := "c=biws,r=" + attrs["r"]
	sc.authMessage = sc.first + "," + string(serverFirst) + "," + withoutProof
	proof := mac(stored[:], sc.authMessage)
	for i := range proof {
		proof[i] ^= clientKey[i]
	}
	sc.serverSignature = mac(mac(salted, "Server Key"), sc.authMessage)
	return []byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)), nil
}

// verify checks the server-final message proves the server knew the key.
func (sc *scramClient) verify(t *testing.T, serverFinal []byte) {
	t.Helper()
	if want := "v=" + base64.StdEncoding.EncodeToString(sc.serverSignature); string(serverFinal) != want {
		t.Errorf("server-final %q, want %q", serverFinal, want)
	}
}

// scramServer offers SCRAM-SHA-256 with users alice (password wonderland)
// and bob (builder).
func scramServer(t *testing.T) (*mqttd.Server, string) {
	t.Helper()
	creds := map[string]auth.SCRAMCredentials{}
	for user, password := range map[string]string{"alice": "wonderland", "bob": "builder"} {
		c, err := auth.NewSCRAMCredentials(password, nil, 4096)
		if err != nil {
			t.Fatal(err)
		}
		creds[user] = c
	}
	lookup := func(u string) (auth.SCRAMCredentials, bool) { c, ok := creds[u]; return c, ok }
	return startServer(t, mqttd.Options{AuthMethods: []auth.Method{&auth.SCRAM{Lookup: lookup}}})
}

// scramConnect runs the CONNECT exchange and returns the connection and
// its CONNACK.
func scramConnect(t *testing.T, addr string, sc *scramClient) (*rawConn, *packets.Connack) {
	t.Helper()
	rc := dialRaw(t, addr)
	rc.v = packets.V5
	cp := &packets.Connect{ProtocolName: "MQTT", ProtocolVersion: packets.V5, ClientID: "scram-" + sc.user, CleanStart: true}
	cp.Properties.AuthMethod, cp.Properties.AuthData = auth.SCRAMName, sc.clientFirst()
	cp.Properties.Set(packets.PropAuthMethod)
	cp.Properties.Set(packets.PropAuthData)
	rc.send(cp)
	challenge, ok := rc.read().(*packets.Auth)
	if !ok || challenge.ReasonCode != packets.ContinueAuthentication || challenge.Properties.AuthMethod != auth.SCRAMName {
		t.Fatalf("got %+v, want AUTH 0x18", challenge)
	}
	rc.send(authPacket(packets.ContinueAuthentication, sc.clientFinal(t, challenge.Properties.AuthData)))
	ack, ok := rc.read().(*packets.Connack)
	if !ok {
		t.Fatalf("got %+v, want CONNACK", ack)
	}
	return rc, ack
}

func authPacket(code packets.ReasonCode, data []byte) *packets.Auth {
	a := &packets.Auth{ReasonCode: code}
	a.Properties.AuthMethod, a.Properties.AuthData = auth.SCRAMName, data
	a.Properties.Set(packets.PropAuthMethod)
	a.Properties.Set(packets.PropAuthData)
	return a
}
