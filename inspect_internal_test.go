package mqttd

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"mqttd/session"
)

// TestLeastSorted checks the page cut against sorting everything.
func TestLeastSorted(t *testing.T) {
	for _, size := range []int{2, 3, 10, 100, 1000} {
		items := make([]string, size)
		for i := range items {
			items[i] = fmt.Sprintf("%08d", rand.IntN(1_000_000_000))
		}
		want := slices.Sorted(slices.Values(items))
		for _, n := range []int{1, 2, size / 2, size - 1} {
			if n < 1 {
				continue
			}
			got := leastSorted(slices.Clone(items), n, strings.Compare)
			if !slices.Equal(got, want[:n]) {
				t.Fatalf("%d items, %d least: %q, want %q", size, n, got, want[:n])
			}
		}
	}
}

// withSessions returns a server holding n offline sessions, as a broker
// with n devices does, without the n connections.
func withSessions(b *testing.B, n int) *Server {
	b.Helper()
	s, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	for range n {
		id := fmt.Sprintf("device-%08d", rand.IntN(1_000_000_000))
		s.clients.Put(&client{id: id, sess: session.New(s.sessLim)})
	}
	return s
}

// BenchmarkClientsPage is what one page of 100 of /api/v1/clients costs a
// broker holding 100,000 sessions, from the start and from the middle
// (page), and the part of it that holds the registry lock (locked).
func BenchmarkClientsPage(b *testing.B) {
	s := withSessions(b, 100_000)
	ids := make([]string, 0, s.clients.Len())
	for cl := range s.clients.All {
		ids = append(ids, cl.id)
	}
	slices.Sort(ids)
	for _, bc := range []struct{ name, after string }{{"first", ""}, {"middle", ids[len(ids)/2]}} {
		b.Run("page/"+bc.name, func(b *testing.B) {
			for b.Loop() {
				if page, _ := s.Clients(bc.after, 100); len(page) != 100 {
					b.Fatalf("a page of %d", len(page))
				}
			}
		})
		b.Run("locked/"+bc.name, func(b *testing.B) {
			for b.Loop() {
				s.clientsAfter(bc.after)
			}
		})
	}
}
