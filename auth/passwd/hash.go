// Package passwd reads and writes password files in the format of
// Mosquitto's mosquitto_passwd and authenticates clients against them.
//
// A file holds one user a line, "user:hash", where hash is
// "$7$iterations$salt$sum" (PBKDF2-HMAC-SHA512, a 64-byte sum) or
// "$6$salt$sum" (SHA-512 of the password followed by the salt), salt and
// sum in standard base64. Blank lines and lines starting with # are
// ignored; any other line that does not parse is an error naming the file
// and the line, so a damaged file is never read as fewer users (or none).
// New entries are written as $7$ with a random 12-byte salt and 101
// iterations, as mosquitto_passwd writes them.
//
// It imports only the standard library and mqttd/auth.
package passwd

import (
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Parameters of the hashes mosquitto_passwd writes.
const (
	// DefaultIterations is the PBKDF2 iteration count of new entries.
	DefaultIterations = 101
	saltLen           = 12
	sumLen            = sha512.Size
	// maxIterations bounds what a file may ask for, so one line cannot
	// make every login (or the dummy check for unknown users) take
	// minutes.
	maxIterations = 1 << 20
)

// Hash is one user's stored password hash.
type Hash struct {
	pbkdf2     bool // $7$; else $6$
	iterations int
	salt, sum  []byte
}

// NewHash hashes password as a new $7$ entry: a random 12-byte salt and
// DefaultIterations rounds.
func NewHash(password []byte) (Hash, error) {
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return Hash{}, err
	}
	h := Hash{pbkdf2: true, iterations: DefaultIterations, salt: salt}
	sum, err := h.compute(password)
	if err != nil {
		return Hash{}, err
	}
	h.sum = sum
	return h, nil
}

// ParseHash parses the part of a line after "user:".
func ParseHash(s string) (Hash, error) {
	var h Hash
	var rest string
	switch {
	case strings.HasPrefix(s, "$7$"):
		h.pbkdf2 = true
		it, r, ok := strings.Cut(s[3:], "$")
		if !ok {
			return h, errors.New("$7$ hash without salt")
		}
		n, err := strconv.Atoi(it)
		if err != nil || n < 1 || n > maxIterations {
			return h, fmt.Errorf("bad iteration count %q", it)
		}
		h.iterations, rest = n, r
	case strings.HasPrefix(s, "$6$"):
		rest = s[3:]
	default:
		return h, errors.New("not a $6$ or $7$ hash (a plain-text password? hash it with mqttd passwd)")
	}
	salt64, sum64, ok := strings.Cut(rest, "$")
	if !ok {
		return h, errors.New("hash without a salt and sum")
	}
	var err error
	// Mosquitto reads 12-byte salts (what it writes) and 64-byte ones
	// (what later versions may write).
	if h.salt, err = base64.StdEncoding.Strict().DecodeString(salt64); err != nil || (len(h.salt) != saltLen && len(h.salt) != sumLen) {
		return h, errors.New("salt is not 12 or 64 bytes of base64")
	}
	if h.sum, err = base64.StdEncoding.Strict().DecodeString(sum64); err != nil || len(h.sum) != sumLen {
		return h, errors.New("sum is not 64 bytes of base64")
	}
	return h, nil
}

// Legacy reports a $6$ entry: one salted SHA-512, as Mosquitto before 2.0
// wrote them. It cannot be made $7$ without the password.
func (h Hash) Legacy() bool { return !h.pbkdf2 }

// String is the hash as written in a file.
func (h Hash) String() string {
	salt, sum := base64.StdEncoding.EncodeToString(h.salt), base64.StdEncoding.EncodeToString(h.sum)
	if h.pbkdf2 {
		return fmt.Sprintf("$7$%d$%s$%s", h.iterations, salt, sum)
	}
	return fmt.Sprintf("$6$%s$%s", salt, sum)
}

// Verify reports whether password matches, comparing in constant time.
func (h Hash) Verify(password []byte) bool {
	sum, err := h.compute(password)
	return err == nil && len(h.sum) == sumLen && subtle.ConstantTimeCompare(sum, h.sum) == 1
}

func (h Hash) compute(password []byte) ([]byte, error) {
	if h.pbkdf2 {
		return pbkdf2.Key(sha512.New, string(password), h.salt, h.iterations, sumLen)
	}
	d := sha512.New()
	d.Write(password)
	d.Write(h.salt)
	return d.Sum(nil), nil
}
