package acl_test

import (
	"fmt"
	"strings"
	"testing"

	"mqttd/auth"
	"mqttd/auth/acl"
)

// benchRules is a file of the size a small installation has: 100 users
// with a few rules each, anonymous rules and patterns.
func benchRules(b *testing.B) *acl.Rules {
	b.Helper()
	var sb strings.Builder
	sb.WriteString("topic read public/#\ntopic deny public/private/#\n")
	sb.WriteString("pattern deny devices/%u/locked\npattern readwrite devices/%u/#\npattern read clients/%c/#\n")
	for i := range 100 {
		fmt.Fprintf(&sb, "user user%d\ntopic readwrite home/%d/#\ntopic read sensors/+/temp\ntopic deny home/%d/admin\n", i, i, i)
	}
	rs, err := acl.Parse("bench", strings.NewReader(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	return rs
}

func BenchmarkAuthorize(b *testing.B) {
	rs := benchRules(b)
	user := auth.ClientInfo{Username: "user42", ClientID: "client-42"}
	for _, bc := range []struct {
		name string
		c    auth.ClientInfo
		r    auth.Request
	}{
		{"user-publish", user, auth.Request{Action: auth.Publish, Topic: "home/42/kitchen/light"}},
		{"user-read-denied", user, auth.Request{Action: auth.Read, Topic: "home/42/admin"}},
		{"pattern-publish", user, auth.Request{Action: auth.Publish, Topic: "devices/user42/status"}},
		{"pattern-read", user, auth.Request{Action: auth.Read, Topic: "clients/client-42/cmd"}},
		{"subscribe", user, auth.Request{Action: auth.Subscribe, Topic: "sensors/+/temp"}},
		{"anonymous-read", auth.ClientInfo{ClientID: "x"}, auth.Request{Action: auth.Read, Topic: "public/a/b"}},
		{"no-match", user, auth.Request{Action: auth.Read, Topic: "other/topic/here"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rs.Authorize(bc.c, bc.r)
			}
		})
	}
}
