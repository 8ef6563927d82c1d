package auth

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// SCRAMName is the Authentication Method name of SCRAM-SHA-256.
const SCRAMName = "SCRAM-SHA-256"

// SCRAMCredentials is what the server keeps of a user's password for
// SCRAM-SHA-256 (RFC 5802 §3): never the password itself, nor anything a
// client could log in with.
type SCRAMCredentials struct {
	Salt       []byte
	Iterations int
	StoredKey  []byte // H(ClientKey)
	ServerKey  []byte // HMAC(SaltedPassword, "Server Key")
}

// DefaultSCRAMIterations is the iteration count NewSCRAMCredentials uses
// when given 0: RFC 7677 asks for at least 4096.
const DefaultSCRAMIterations = 4096

// NewSCRAMCredentials derives the stored credentials of a password with
// salt (16 random bytes when nil) and iterations (DefaultSCRAMIterations
// when 0). The password is used as given: SASLprep is not applied, so
// clients must send non-ASCII passwords in the same form.
func NewSCRAMCredentials(password string, salt []byte, iterations int) (SCRAMCredentials, error) {
	if iterations == 0 {
		iterations = DefaultSCRAMIterations
	}
	if salt == nil {
		salt = make([]byte, 16)
		rand.Read(salt)
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return SCRAMCredentials{}, err
	}
	clientKey := hmacSHA256(salted, []byte("Client Key"))
	stored := sha256.Sum256(clientKey)
	return SCRAMCredentials{Salt: salt, Iterations: iterations, StoredKey: stored[:],
		ServerKey: hmacSHA256(salted, []byte("Server Key"))}, nil
}

// SCRAM is the SCRAM-SHA-256 method (RFC 5802, RFC 7677): the client
// proves it knows the password without sending it, and proves nothing to
// anyone who reads the server's credentials. Channel binding is not
// offered. A user Lookup does not know goes through the same exchange
// with credentials made up from a secret, so that a client cannot tell
// unknown users from wrong passwords.
type SCRAM struct {
	// Lookup returns a user's credentials; false for an unknown user.
	Lookup func(username string) (SCRAMCredentials, bool)
	// Nonce makes the server's part of the nonce; nil means 18 random
	// bytes. Tests set it to replay the RFC's example.
	Nonce func() string

	once   sync.Once
	secret []byte
}

// Name implements Method.
func (*SCRAM) Name() string { return SCRAMName }

// Start implements Method.
func (s *SCRAM) Start(ClientInfo) Exchange {
	s.once.Do(func() {
		s.secret = make([]byte, 32)
		rand.Read(s.secret)
	})
	return &scramExchange{m: s}
}

// scramExchange is one client's SCRAM-SHA-256 exchange: client-first,
// server-first, client-final, server-final.
type scramExchange struct {
	m           *SCRAM
	step        int
	user        string
	gs2Header   string
	clientFirst string // client-first-message-bare
	serverFirst string
	nonce       string
	cred        SCRAMCredentials
	known       bool
}

var errSCRAM = fmt.Errorf("%w: malformed SCRAM message", ErrNotAuthorized)

// Next implements Exchange.
func (x *scramExchange) Next(data []byte) ([]byte, bool, error) {
	switch x.step {
	case 0:
		x.step++
		return x.clientFirstMessage(string(data))
	case 1:
		x.step++
		return x.clientFinalMessage(string(data))
	}
	return nil, false, errSCRAM
}

// Username implements Exchange.
func (x *scramExchange) Username() string { return x.user }

func (x *scramExchange) clientFirstMessage(msg string) ([]byte, bool, error) {
	// gs2-header: a channel binding flag and an empty authzid.
	flag, rest, ok := strings.Cut(msg, ",")
	if !ok || (flag != "n" && flag != "y") {
		return nil, false, fmt.Errorf("%w: channel binding is not offered", ErrNotAuthorized)
	}
	authzid, bare, ok := strings.Cut(rest, ",")
	if !ok || authzid != "" {
		return nil, false, errSCRAM
	}
	x.gs2Header = flag + ",,"
	name, rest, ok := strings.Cut(bare, ",")
	user, okUser := scramName(name)
	nonce, _, _ := strings.Cut(strings.TrimPrefix(rest, "r="), ",")
	if !ok || !okUser || !strings.HasPrefix(rest, "r=") || !printable(nonce) {
		return nil, false, errSCRAM
	}
	x.user, x.clientFirst = user, bare
	x.cred, x.known = x.m.Lookup(user)
	if !x.known {
		x.cred = x.m.made(user)
	}
	server := ""
	if x.m.Nonce != nil {
		server = x.m.Nonce()
	} else {
		var b [18]byte
		rand.Read(b[:])
		server = base64.StdEncoding.EncodeToString(b[:])
	}
	x.nonce = nonce + server
	x.serverFirst = "r=" + x.nonce + ",s=" + base64.StdEncoding.EncodeToString(x.cred.Salt) + ",i=" + strconv.Itoa(x.cred.Iterations)
	return []byte(x.serverFirst), false, nil
}

func (x *scramExchange) clientFinalMessage(msg string) ([]byte, bool, error) {
	withoutProof, proof64, ok := strings.Cut(msg, ",p=")
	binding, rest, ok2 := strings.Cut(withoutProof, ",")
	if !ok || !ok2 || binding != "c="+base64.StdEncoding.EncodeToString([]byte(x.gs2Header)) {
		return nil, false, errSCRAM
	}
	nonce, _, _ := strings.Cut(strings.TrimPrefix(rest, "r="), ",")
	proof, err := base64.StdEncoding.DecodeString(proof64)
	if !strings.HasPrefix(rest, "r=") || nonce != x.nonce || err != nil || len(proof) != sha256.Size {
		return nil, false, errSCRAM
	}
	authMessage := []byte(x.clientFirst + "," + x.serverFirst + "," + withoutProof)
	clientKey := hmacSHA256(x.cred.StoredKey, authMessage) // ClientSignature, then ClientKey
	for i := range clientKey {
		clientKey[i] ^= proof[i]
	}
	stored := sha256.Sum256(clientKey)
	if subtle.ConstantTimeCompare(stored[:], x.cred.StoredKey) != 1 || !x.known {
		return nil, false, ErrBadCredentials
	}
	return []byte("v=" + base64.StdEncoding.EncodeToString(hmacSHA256(x.cred.ServerKey, authMessage))), true, nil
}

// made is the credentials an unknown user is given: the same every time,
// from the server's secret, so that asking twice tells nothing either.
func (s *SCRAM) made(user string) SCRAMCredentials {
	seed := hmacSHA256(s.secret, []byte(user))
	return SCRAMCredentials{Salt: seed[:16], Iterations: DefaultSCRAMIterations,
		StoredKey: hmacSHA256(seed, []byte("stored")), ServerKey: hmacSHA256(seed, []byte("server"))}
}

// scramName decodes a SCRAM saslname ("n=..."): "=2C" is a comma and
// "=3D" an equals sign; any other "=" is malformed (RFC 5802 §5.1).
func scramName(attr string) (string, bool) {
	name, ok := strings.CutPrefix(attr, "n=")
	if !ok || name == "" {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] != '=' {
			b.WriteByte(name[i])
			continue
		}
		switch {
		case strings.HasPrefix(name[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(name[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// printable reports a valid SCRAM nonce: printable ASCII but the comma.
func printable(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == ',' {
			return false
		}
	}
	return true
}

func hmacSHA256(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return h.Sum(nil)
}
