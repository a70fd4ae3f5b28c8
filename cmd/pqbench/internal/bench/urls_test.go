package bench

import "testing"

// The Node peers read only URLs and know no fallback from TLS: they get
// the admin string as a URL on their database, without TLS when the Go
// side's connection has none (sslmode=prefer on a server without TLS).
func TestPeerURL(t *testing.T) {
	for _, c := range []struct {
		admin  string
		useTLS bool
		want   string
	}{
		{"postgres://postgres@localhost:5432/postgres", false, "postgres://postgres@localhost:5432/w?sslmode=disable"},
		{"postgres://postgres@127.0.0.1:5432/postgres?sslmode=prefer", false, "postgres://postgres@127.0.0.1:5432/w?sslmode=disable"},
		{"postgres://u:pw@db:5432/postgres?sslmode=require", true, "postgres://u:pw@db:5432/w?sslmode=require"},
		{"host=localhost port=5432 user=postgres dbname=postgres", false, "postgres://postgres@localhost:5432/w?sslmode=disable"},
	} {
		if got := peerURL(c.admin, "w", c.useTLS); got != c.want {
			t.Errorf("peerURL(%q, TLS %v) = %q, want %q", c.admin, c.useTLS, got, c.want)
		}
	}
}
