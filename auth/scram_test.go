package auth

import (
	"encoding/base64"
	"errors"
	"testing"
)

// rfc7677 is the example exchange of RFC 7677 §3: user "user", password
// "pencil".
var rfc7677 = struct {
	salt, serverNonce, clientFirst, serverFirst, clientFinal, serverFinal string
}{
	salt:        "W22ZaJ0SNY7soEsUEjb6gQ==",
	serverNonce: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
	clientFirst: "n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
	serverFirst: "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
	clientFinal: "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
	serverFinal: "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
}

func rfcSCRAM(t *testing.T) *SCRAM {
	t.Helper()
	salt, _ := base64.StdEncoding.DecodeString(rfc7677.salt)
	cred, err := NewSCRAMCredentials("pencil", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	return &SCRAM{
		Lookup: func(u string) (SCRAMCredentials, bool) { return cred, u == "user" },
		Nonce:  func() string { return rfc7677.serverNonce },
	}
}

// TestSCRAMRFC7677 replays the RFC's example: the server's messages are
// the RFC's to the byte, and the client is authenticated as "user".
func TestSCRAMRFC7677(t *testing.T) {
	x := rfcSCRAM(t).Start(ClientInfo{})
	out, done, err := x.Next([]byte(rfc7677.clientFirst))
	if err != nil || done || string(out) != rfc7677.serverFirst {
		t.Fatalf("server-first %q, %v, %v; want %q", out, done, err, rfc7677.serverFirst)
	}
	out, done, err = x.Next([]byte(rfc7677.clientFinal))
	if err != nil || !done || string(out) != rfc7677.serverFinal {
		t.Fatalf("server-final %q, %v, %v; want %q", out, done, err, rfc7677.serverFinal)
	}
	if x.Username() != "user" {
		t.Errorf("username %q", x.Username())
	}
}

// TestSCRAMRefusals checks what the server refuses: a wrong proof and an
// unknown user (both bad credentials, the latter after the same
// exchange), channel binding, and malformed messages at either step.
func TestSCRAMRefusals(t *testing.T) {
	s := rfcSCRAM(t)
	finish := func(first, final string) error {
		x := s.Start(ClientInfo{})
		if _, _, err := x.Next([]byte(first)); err != nil {
			return err
		}
		_, _, err := x.Next([]byte(final))
		return err
	}
	wrongProof := rfc7677.clientFinal[:len(rfc7677.clientFinal)-5] + "AAAA="
	if err := finish(rfc7677.clientFirst, wrongProof); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("wrong proof: %v", err)
	}
	x := s.Start(ClientInfo{})
	out, _, err := x.Next([]byte("n,,n=nobody,r=rOprNGfwEbeRWgbNEkqO"))
	if err != nil || len(out) == 0 {
		t.Fatalf("unknown user refused at once (%v): that tells users apart", err)
	}
	if _, _, err := x.Next([]byte(rfc7677.clientFinal)); !errors.Is(err, ErrBadCredentials) {
		t.Errorf("unknown user: %v", err)
	}
	for _, first := range []string{"p=tls-unique,,n=user,r=abc", "n,a=admin,n=user,r=abc", "n,,n=user", "n,,r=abc", "n,,n=us=er,r=abc", ""} {
		if _, _, err := s.Start(ClientInfo{}).Next([]byte(first)); err == nil {
			t.Errorf("client-first %q accepted", first)
		}
	}
	for _, final := range []string{"", "c=biws", "c=eSws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
		"c=biws,r=other,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=!!"} {
		if err := finish(rfc7677.clientFirst, final); err == nil {
			t.Errorf("client-final %q accepted", final)
		}
	}
	x = s.Start(ClientInfo{})
	x.Next([]byte(rfc7677.clientFirst))
	x.Next([]byte(rfc7677.clientFinal))
	if _, _, err := x.Next(nil); err == nil {
		t.Error("a third message accepted")
	}
}

// TestSCRAMNames checks the saslname escapes of RFC 5802 §5.1.
func TestSCRAMNames(t *testing.T) {
	for in, want := range map[string]string{"n=a=2Cb": "a,b", "n=a=3Db": "a=b", "n=plain": "plain"} {
		if got, ok := scramName(in); !ok || got != want {
			t.Errorf("scramName(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"n=", "n=a=b", "n=a=2", "x=a"} {
		if _, ok := scramName(in); ok {
			t.Errorf("scramName(%q) accepted", in)
		}
	}
}
